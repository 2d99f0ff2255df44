"""Every text the plugin's commands reply with, in Chinese (``zh``, the default) and English
(``en``): ``AUTO_ASSIGN_LANGUAGE`` picks one.

Both catalogues have the same keys, and each key the same ``{placeholders}`` in both languages
(``tests/test_i18n.py`` checks it). A reply is built with ``Texts(language)(key, **values)``.
Service words that stay as they are in both languages: configuration keys (``excludeChannels``,
``SUPERUSERS``, …), bot and group numbers, and the error a failed request gives (for operators).
"""

from __future__ import annotations

from typing import Any, Literal

Language = Literal["zh", "en"]
LANGUAGES: tuple[Language, ...] = ("zh", "en")

ZH: dict[str, str] = {
    # --- help (``aa`` or ``aa help``) and usage lines
    "help.title": "auto-assign：每个群只由一个 bot 应答。命令（{cmd}，也可写 {alias}）：",
    "help.line": "{usage}（或 {aliases}）：{desc}",
    "help.who": "查询命令：{readers}；修改命令：仅超级用户。",
    "help.config": "在 .env 中设置 AUTO_ASSIGN_URL 和 AUTO_ASSIGN_TOKEN；AUTO_ASSIGN_LANGUAGE 选择回复"
    "语言（zh 或 en），AUTO_ASSIGN_READ_PERMISSION 决定谁能用查询命令。",
    "who.everyone": "所有人",
    "who.admin": "群主、群管理员和超级用户",
    "who.superuser": "仅超级用户",
    "usage.help": "{cmd} help",
    "usage.explain": "{cmd} explain [群号]",
    "usage.status": "{cmd} status",
    "usage.rebalance": "{cmd} rebalance",
    "desc.help": "显示本帮助",
    "desc.explain": "谁在这个群应答、为什么；不写群号就是当前群",
    "desc.status": "各 bot 的负载、本进程的 bot、服务是否可达、上次重新分配",
    "desc.rebalance": "立即重新分配，仅超级用户",
    # --- parsing and permissions
    "unknown_sub": "没有子命令“{word}”。发送 {cmd} help 查看用法。",
    "unknown_flag": "{command} 没有选项 {flag}。用法：{usage}",
    "too_many_args": "参数太多。用法：{usage}",
    "denied.superuser": "只有超级用户（SUPERUSERS）可以使用 {command}。",
    "denied.admin": "只有群主、群管理员和超级用户可以使用 {command}。",
    # --- the service
    "unreachable": "无法连接 auto-assign 服务（{error}）。",
    "rejected": "auto-assign 服务拒绝了请求（{error}）。",
    "rejected.token": "auto-assign 服务拒绝了令牌（{error}），请检查 AUTO_ASSIGN_TOKEN。",
    "failed": "出错了（{error}），详见 NoneBot 日志。",
    "list.sep": "、",
    # --- explain
    "explain.assignee": "群 {group}：由 {bot} 应答。",
    "explain.assignee_offline": "群 {group}：指定的 {bot} 不在线，每条消息由先抢到的 bot 应答。",
    "explain.nobody": "群 {group}：没有指定的 bot，每条消息由先抢到的 bot 应答。",
    "explain.reason": "原因：{reason}",
    "explain.members": "成员：{members}",
    "explain.member": "{bot}（{load} 个群）",
    "explain.member_offline": "{bot}（离线）",
    "list.more": "等共 {n} 个",
    "explain.not_committed": "（这个分配还没写入数据库）",
    "explain.need_group": "请写明群号：{usage}",
    "explain.bad_group": "“{group}”不是群号。",
    "explain.local": "按本进程最近收到的分配，群 {group} 由 {bot} 应答。",
    "explain.local_none": "本进程最近收到的分配里没有群 {group}。",
    "reason.pinned": "由 channelBotPriority 指定",
    "reason.excluded": "这个群在 excludeChannels 中，服务不为它分配或更换 bot",
    "reason.only_member": "它是这个群里唯一在线的 bot",
    "reason.balanced": "负载均衡，这样分配各 bot 的负载最均匀",
    "reason.no_valid_bot": "这个群里没有在线的 bot",
    "reason.waiting_for_rebalance": "原来的 bot 已不可用，下次重新分配时更换",
    "reason.platform_disabled": "平台 {platform} 不在 enabledPlatforms 中",
    "reason.unknown_channel": "没有 bot 报告自己在这个群里",
    "reason.other": "{text}",
    # --- status
    "status.service_ok": "auto-assign 服务：可连接；分配流：{stream}",
    "status.service_down": "auto-assign 服务：无法连接（{error}）",
    "status.service_refused": "auto-assign 服务：拒绝了请求（{error}）",
    "status.stream_up": "已连接",
    "status.stream_down": "未连接",
    "status.local_table": "分配流：{stream}；本进程按最近收到的分配（{groups} 个群）决定",
    "status.counts": "{platform}：已分配 {assigned} 个群，未分配 {unassigned}，排除 {excluded}",
    "status.loads": "负载（群数）：{loads}",
    "status.load": "{bot} {load}",
    "status.load_offline": "{bot} 离线",
    "status.no_bots": "服务还不知道任何 bot。",
    "status.ours": "本进程（{reporter}）：{bots}",
    "status.ours_none": "本进程（{reporter}）：没有已连接的 bot",
    "status.last_run": "上次重新分配：#{number}（{causes}），{ago}；迁移：强制 {forced}，主动 {voluntary}",
    "status.no_run": "还没有重新分配过。",
    "ago.seconds": "{n} 秒前",
    "ago.minutes": "{n} 分钟前",
    "ago.hours": "{n} 小时前",
    "ago.days": "{n} 天前",
    "cause.startup": "启动",
    "cause.schedule": "定时",
    "cause.config-changed": "配置变更",
    "cause.bot-online": "bot 上线",
    "cause.bot-offline": "bot 下线",
    "cause.bot-status": "bot 状态变化",
    "cause.channel-joined": "入群",
    "cause.channel-left": "退群",
    "cause.requested": "手动请求",
    "cause.takeover": "接任主节点",
    # --- rebalance
    "rebalance.requested": "已请求重新分配。稍后发送 {cmd} status 查看结果。",
    "rebalance.follower": "这个服务实例不是主节点，不能重新分配（{error}）。",
}

EN: dict[str, str] = {
    # --- help (``aa`` or ``aa help``) and usage lines
    "help.title": "auto-assign: one bot answers each group. Commands ({cmd}, or {alias}):",
    "help.line": "{usage} (or {aliases}): {desc}",
    "help.who": "Reading commands: {readers}; changing commands: superusers only.",
    "help.config": "Set AUTO_ASSIGN_URL and AUTO_ASSIGN_TOKEN in .env; AUTO_ASSIGN_LANGUAGE picks "
    "the replies' language (zh or en), AUTO_ASSIGN_READ_PERMISSION who may use the reading "
    "commands.",
    "who.everyone": "everyone",
    "who.admin": "group owners, group admins and superusers",
    "who.superuser": "superusers only",
    "usage.help": "{cmd} help",
    "usage.explain": "{cmd} explain [group]",
    "usage.status": "{cmd} status",
    "usage.rebalance": "{cmd} rebalance",
    "desc.help": "this help",
    "desc.explain": "who answers in the group and why (default: this group)",
    "desc.status": "load per bot, this process's bots, whether the service is reachable, "
    "the last rebalance",
    "desc.rebalance": "rebalance now; superusers only",
    # --- parsing and permissions
    "unknown_sub": 'There is no subcommand "{word}". Send {cmd} help for the usage.',
    "unknown_flag": "{command} has no option {flag}. Usage: {usage}",
    "too_many_args": "Too many arguments. Usage: {usage}",
    "denied.superuser": "Only superusers (SUPERUSERS) may use {command}.",
    "denied.admin": "Only group owners, group admins and superusers may use {command}.",
    # --- the service
    "unreachable": "The auto-assign service cannot be reached ({error}).",
    "rejected": "The auto-assign service refused the request ({error}).",
    "rejected.token": "The auto-assign service refused the token ({error}): check "
    "AUTO_ASSIGN_TOKEN.",
    "failed": "Something went wrong ({error}); see NoneBot's log.",
    "list.sep": ", ",
    # --- explain
    "explain.assignee": "Group {group}: {bot} answers.",
    "explain.assignee_offline": "Group {group}: its bot {bot} is offline; each message goes to "
    "the first bot to claim it.",
    "explain.nobody": "Group {group}: no bot is assigned; each message goes to the first bot to "
    "claim it.",
    "explain.reason": "Why: {reason}",
    "explain.members": "Members: {members}",
    "explain.member": "{bot} ({load} groups)",
    "explain.member_offline": "{bot} (offline)",
    "list.more": "{n} in all",
    "explain.not_committed": "(this assignment is not written to the database yet)",
    "explain.need_group": "Name the group: {usage}",
    "explain.bad_group": '"{group}" is not a group number.',
    "explain.local": "By the last assignment this process received, {bot} answers in group "
    "{group}.",
    "explain.local_none": "The last assignment this process received has no group {group}.",
    "reason.pinned": "pinned by channelBotPriority",
    "reason.excluded": "the group is in excludeChannels: the service never assigns or changes "
    "its bot",
    "reason.only_member": "the only online bot in the group",
    "reason.balanced": "balanced: this spreads the load most evenly over the bots",
    "reason.no_valid_bot": "no bot in the group is online",
    "reason.waiting_for_rebalance": "its bot is not valid any more; the next rebalance replaces it",
    "reason.platform_disabled": "platform {platform} is not in enabledPlatforms",
    "reason.unknown_channel": "no bot reported being in the group",
    "reason.other": "{text}",
    # --- status
    "status.service_ok": "auto-assign service: reachable; assignment stream: {stream}",
    "status.service_down": "auto-assign service: unreachable ({error})",
    "status.service_refused": "auto-assign service: refused the request ({error})",
    "status.stream_up": "connected",
    "status.stream_down": "not connected",
    "status.local_table": "Assignment stream: {stream}; this process decides from the last "
    "assignment it received ({groups} groups)",
    "status.counts": "{platform}: {assigned} groups assigned, {unassigned} unassigned, "
    "{excluded} excluded",
    "status.loads": "Load (groups): {loads}",
    "status.load": "{bot} {load}",
    "status.load_offline": "{bot} offline",
    "status.no_bots": "The service knows no bot yet.",
    "status.ours": "This process ({reporter}): {bots}",
    "status.ours_none": "This process ({reporter}): no bot connected",
    "status.last_run": "Last rebalance: #{number} ({causes}), {ago}; moved {forced} forced, "
    "{voluntary} voluntary",
    "status.no_run": "No rebalance yet.",
    "ago.seconds": "{n} s ago",
    "ago.minutes": "{n} min ago",
    "ago.hours": "{n} h ago",
    "ago.days": "{n} days ago",
    "cause.startup": "startup",
    "cause.schedule": "schedule",
    "cause.config-changed": "configuration changed",
    "cause.bot-online": "bot online",
    "cause.bot-offline": "bot offline",
    "cause.bot-status": "bot status",
    "cause.channel-joined": "group joined",
    "cause.channel-left": "group left",
    "cause.requested": "requested",
    "cause.takeover": "leadership taken over",
    # --- rebalance
    "rebalance.requested": "Rebalance requested. Send {cmd} status in a moment to see the result.",
    "rebalance.follower": "This service instance is not the leader and cannot rebalance ({error}).",
}

CATALOGUES: dict[Language, dict[str, str]] = {"zh": ZH, "en": EN}


class Texts:
    """One language's catalogue: ``texts(key, **values)`` is the text with its placeholders
    filled in."""

    def __init__(self, language: Language) -> None:
        self.language = language
        self.catalogue = CATALOGUES[language]

    def __call__(self, key: str, /, **values: Any) -> str:
        return self.catalogue[key].format(**values)

    def join(self, items: list[str]) -> str:
        return self.catalogue["list.sep"].join(items)

    def causes(self, causes: str) -> str:
        """The service's causes (``bot-offline, channel-joined ×50``) in words."""
        out = []
        for part in causes.split(","):
            label, _, times = part.strip().partition(" ")
            if not label:
                continue
            word = self.catalogue.get(f"cause.{label}", label)
            out.append(f"{word} {times}" if times else word)
        return self.join(out)

    def ago(self, seconds: float) -> str:
        s = max(0, int(seconds))
        if s < 120:
            return self("ago.seconds", n=s)
        if s < 120 * 60:
            return self("ago.minutes", n=s // 60)
        if s < 48 * 3600:
            return self("ago.hours", n=s // 3600)
        return self("ago.days", n=s // 86400)
