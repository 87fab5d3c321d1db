# test_bot.py
import json, subprocess, pytest
from nio import AsyncClient, LoginResponse, RoomSendResponse, SyncResponse

@pytest.fixture
def homeserver():
    proc = subprocess.Popen(["node_modules/.bin/bot-homeserver", "dev", "--fixtures", "fixtures.yaml"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield json.loads(proc.stdout.readline())
    finally:
        proc.stdin.close()          # the server stops when its stdin closes
        proc.wait(timeout=10)

async def test_bot_posts_in_the_lobby(homeserver):
    bot = homeserver["bots"]["echo"]
    lobby = homeserver["rooms"]["lobby"]["room_id"]
    echo = AsyncClient(homeserver["base_url"], "echo")
    alice = AsyncClient(homeserver["base_url"])
    try:
        # The bot logs in with its secret (or: echo.restore_login(bot["user_id"], bot["device_id"], bot["access_token"])).
        assert isinstance(await echo.login(bot["password"]), LoginResponse)
        sent = await echo.room_send(lobby, "m.room.message", {"msgtype": "m.text", "body": "hello"})
        assert isinstance(sent, RoomSendResponse), sent

        # Alice, a member of the lobby, sees it.
        me = homeserver["users"]["alice"]
        alice.restore_login(me["user_id"], me["device_id"], me["access_token"])
        sync = await alice.sync()
        assert isinstance(sync, SyncResponse), sync
        bodies = [event.body for event in sync.rooms.join[lobby].timeline.events if hasattr(event, "body")]
        assert bodies[-1] == "hello"
    finally:
        await echo.close()
        await alice.close()
