"""A matrix-nio bot with end-to-end encryption (libolm through Debian's python3-olm), for the
encrypted end-to-end test. Run with Debian's /usr/bin/python3.

Usage: nio_e2ee_bot.py BASE_URL LOCALPART PASSWORD

It logs in, prints {"ready": true, "user_id": ..., "device_id": ...} once its keys are uploaded,
joins every room it is invited to, and answers "!echo <text>" with "echo: <text>", encrypted in
an encrypted room (so it must have decrypted the command first). Its keys live in a temporary
store that is deleted when it exits.
"""
import asyncio
import json
import shutil
import sys
import tempfile

from nio import AsyncClient, AsyncClientConfig, InviteMemberEvent, LoginResponse, MegolmEvent, RoomMessageText


async def main() -> None:
    base_url, localpart, password = sys.argv[1:4]
    store = tempfile.mkdtemp(prefix="nio-e2ee-")
    client = AsyncClient(base_url, localpart, store_path=store, config=AsyncClientConfig(encryption_enabled=True, store_sync_tokens=False))
    try:
        login = await client.login(password, device_name="nio e2ee bot")
        if not isinstance(login, LoginResponse):
            raise SystemExit(f"login failed: {login}")

        async def on_invite(room, event: InviteMemberEvent) -> None:
            if event.state_key == client.user_id and event.membership == "invite":
                await client.join(room.room_id)

        async def on_message(room, event: RoomMessageText) -> None:
            if event.sender == client.user_id or not event.body.startswith("!echo "):
                return
            reply = {"msgtype": "m.text", "body": "echo: " + event.body[len("!echo "):]}
            await client.room_send(room.room_id, "m.room.message", reply, ignore_unverified_devices=True)

        async def on_undecryptable(room, event: MegolmEvent) -> None:
            print(json.dumps({"undecryptable": event.event_id, "session_id": event.session_id}), file=sys.stderr, flush=True)

        client.add_event_callback(on_invite, InviteMemberEvent)
        client.add_event_callback(on_message, RoomMessageText)
        client.add_event_callback(on_undecryptable, MegolmEvent)
        await client.sync(timeout=0, full_state=True)
        if client.should_upload_keys:
            await client.keys_upload()
        print(json.dumps({"ready": True, "user_id": client.user_id, "device_id": client.device_id}), flush=True)
        await client.sync_forever(timeout=1000, full_state=True)
    finally:
        await client.close()
        shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
