"""A real NoneBot application, as a bot project runs it (``python bot.py``): the FastAPI
driver (uvicorn), the OneBot v11 adapter's reverse WebSocket, this plugin and the test echo
plugin. Its settings come from the ``.env`` in its working directory, which
``tests/processes.py`` writes (``HOST``, ``PORT``, ``AUTO_ASSIGN_*``)."""

import nonebot
from nonebot.adapters.onebot.v11 import Adapter

nonebot.init()
nonebot.get_driver().register_adapter(Adapter)
nonebot.load_plugin("nonebot_plugin_auto_assign")
nonebot.load_plugin("tests.plugins.echo")

if __name__ == "__main__":
    nonebot.run()
