"""A matrix-nio bot for the end-to-end test (run with Debian's /usr/bin/python3).

Usage: nio_bot.py BASE_URL LOCALPART PASSWORD

It logs in with the password, syncs forever, joins every room it is invited to and answers
"!echo <text>" with "echo: <text>". The test drives the rest through JSON lines on stdin, each
answered by one JSON line on stdout: {"id": N, "result": ...} or {"id": N, "error": "..."}.
  {"id": 1, "op": "saw_join", "room_id": ..., "user_id": ...}   resolves once the bot saw the join
  {"id": 2, "op": "create_room", "name": ..., "invite": ...}     -> room id
  {"id": 3, "op": "open_dm", "user_id": ...}                      -> room id, recorded in m.direct
  {"id": 4, "op": "send_image", "room_id", "data" (base64), "name", "mimetype"} -> mxc URI
  {"id": 5, "op": "stop"}
The first line it prints is {"ready": true, "user_id": ...}, after its first sync.
"""
import asyncio
import base64
import io
import json
import sys

from nio import (
    Api,
    AsyncClient,
    AsyncClientConfig,
    InviteMemberEvent,
    JoinError,
    LoginResponse,
    RoomCreateResponse,
    RoomMemberEvent,
    RoomMessageText,
    RoomPreset,
    RoomSendResponse,
    SyncResponse,
    UploadResponse,
)


def say(message):
    print(json.dumps(message), flush=True)


async def main(base_url, localpart, password):
    client = AsyncClient(base_url, localpart, config=AsyncClientConfig(encryption_enabled=False, store_sync_tokens=False))
    login = await client.login(password, device_name="nio e2e")
    if not isinstance(login, LoginResponse):
        raise SystemExit(f"login failed: {login}")
    me = login.user_id

    joins = set()
    join_waiters = []
    first_sync = asyncio.Event()

    async def on_invite(room, event):
        if event.state_key == me and event.membership == "invite":
            joined = await client.join(room.room_id)
            if isinstance(joined, JoinError):
                print(f"join failed: {joined}", file=sys.stderr)

    async def on_member(room, event):
        if event.membership == "join":
            joins.add((room.room_id, event.state_key))
            for waiter in list(join_waiters):
                waiter()

    async def on_message(room, event):
        if event.sender == me or not event.body.startswith("!echo "):
            return
        await client.room_send(room.room_id, "m.room.message", {"msgtype": "m.notice", "body": "echo: " + event.body[len("!echo "):]})

    async def on_sync(_response):
        first_sync.set()

    client.add_event_callback(on_invite, InviteMemberEvent)
    client.add_event_callback(on_member, RoomMemberEvent)
    client.add_event_callback(on_message, RoomMessageText)
    client.add_response_callback(on_sync, SyncResponse)
    syncing = asyncio.ensure_future(client.sync_forever(timeout=30000))
    await first_sync.wait()
    say({"ready": True, "user_id": me})

    async def saw_join(room_id, user_id):
        seen = asyncio.Event()
        check = lambda: (room_id, user_id) in joins and seen.set()
        join_waiters.append(check)
        check()
        await seen.wait()
        join_waiters.remove(check)

    async def create_room(name, invite):
        response = await client.room_create(name=name, invite=[invite])
        if not isinstance(response, RoomCreateResponse):
            raise RuntimeError(f"room_create: {response}")
        return response.room_id

    async def open_dm(user_id):
        response = await client.room_create(is_direct=True, invite=[user_id], preset=RoomPreset.trusted_private_chat)
        if not isinstance(response, RoomCreateResponse):
            raise RuntimeError(f"room_create: {response}")
        # nio 0.20 has no account-data setter; this is the request it would make, on its own transport.
        path = Api._build_path(["user", me, "account_data", "m.direct"], {"access_token": client.access_token})
        answer = await client.send("PUT", path, json.dumps({user_id: [response.room_id]}))
        if answer.status != 200:
            raise RuntimeError(f"m.direct: {answer.status} {await answer.text()}")
        return response.room_id

    async def send_image(room_id, data, name, mimetype):
        raw = base64.b64decode(data)
        uploaded, _keys = await client.upload(lambda *_: io.BytesIO(raw), content_type=mimetype, filename=name, filesize=len(raw))
        if not isinstance(uploaded, UploadResponse):
            raise RuntimeError(f"upload: {uploaded}")
        content = {"msgtype": "m.image", "body": name, "url": uploaded.content_uri, "info": {"mimetype": mimetype, "size": len(raw)}}
        sent = await client.room_send(room_id, "m.room.message", content)
        if not isinstance(sent, RoomSendResponse):
            raise RuntimeError(f"room_send: {sent}")
        return uploaded.content_uri

    async def handle(command):
        op = command["op"]
        if op == "saw_join":
            await saw_join(command["room_id"], command["user_id"])
            return True
        if op == "create_room":
            return await create_room(command["name"], command["invite"])
        if op == "open_dm":
            return await open_dm(command["user_id"])
        if op == "send_image":
            return await send_image(command["room_id"], command["data"], command["name"], command["mimetype"])
        raise RuntimeError(f"unknown op {op}")

    async def answer(command):
        try:
            say({"id": command["id"], "result": await handle(command)})
        except Exception as err:  # reported to the test, which fails with it
            say({"id": command["id"], "error": f"{type(err).__name__}: {err}"})

    loop = asyncio.get_running_loop()
    pending = set()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        command = json.loads(line)
        if command["op"] == "stop":
            break
        task = asyncio.ensure_future(answer(command))
        pending.add(task)
        task.add_done_callback(pending.discard)

    syncing.cancel()
    await client.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
