"""Every text the plugin's commands reply with, in Chinese (``zh``, the default) and English
(``en``): ``AUTO_ASSIGN_LANGUAGE`` picks one.

Both catalogues have the same keys, and each key the same ``{placeholders}`` in both languages
(``tests/test_i18n.py`` checks it). A reply is built with ``Texts(language)(key, **values)``.
Service words that stay as they are in both languages: configuration keys (``excludeChannels``,
``SUPERUSERS``, …), bot and group numbers, and the error a failed request gives (for operators).
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Literal

Language = Literal["zh", "en"]
LANGUAGES: tuple[Language, ...] = ("zh", "en")

ZH: dict[str, str] = {
    # --- help (``aa`` or ``aa help``) and usage lines
    "help.title": "auto-assign：每个群只由一个 bot 应答。命令（{cmd}，也可写 {alias}）：",
    "help.line": "{usage}（或 {aliases}）：{desc}",
    "help.who": "查询命令：{readers}；修改命令：仅超级用户。",
    "help.config": "在 .env 中设置 AUTO_ASSIGN_URL 和 AUTO_ASSIGN_TOKEN（report 角色的令牌；修改命令要 "
    "admin）；https 服务用 AUTO_ASSIGN_CA_FILE 指定 CA；AUTO_ASSIGN_LANGUAGE 选择回复语言（zh 或 en），"
    "AUTO_ASSIGN_READ_PERMISSION 决定谁能用查询命令。",
    "who.everyone": "所有人",
    "who.admin": "群主、群管理员和超级用户",
    "who.superuser": "仅超级用户",
    "usage.help": "{cmd} help",
    "usage.explain": "{cmd} explain [群号]",
    "usage.status": "{cmd} status",
    "usage.rebalance": "{cmd} rebalance [--dry-run]",
    "usage.pins": "{cmd} pins",
    "usage.drains": "{cmd} drains",
    "usage.dry-run": "{cmd} dry-run",
    "usage.pin": "{cmd} pin [bot] [-g 群号] [--until 2h] [--note 备注]",
    "usage.hold": "{cmd} hold [-g 群号] [--until 2h] [--note 备注]",
    "usage.unpin": "{cmd} unpin [-g 群号]",
    "usage.drain": "{cmd} drain <bot> [--until 1d] [--note 备注]",
    "usage.undrain": "{cmd} undrain <bot>",
    "desc.help": "显示本帮助",
    "desc.explain": "谁在这个群应答、为什么；不写群号就是当前群",
    "desc.status": "各 bot 的负载、本进程的 bot、服务是否可达、上次重新分配",
    "desc.rebalance": "立即重新分配，仅超级用户；加 --dry-run 只预演（迁移哪些群、负载前后），什么都不改",
    "desc.pins": "列出固定和保持空的群",
    "desc.drains": "列出排空的 bot",
    "desc.dry-run": "同 rebalance --dry-run",
    "desc.pin": "把群（默认当前群）固定到一个 bot（默认收到命令的 bot），仅超级用户",
    "desc.hold": "让群保持空：没有 bot 应答，仅超级用户",
    "desc.unpin": "取消群的固定或保持空，仅超级用户",
    "desc.drain": "排空一个 bot：只保留别的 bot 接不了的群，不再分到新群，仅超级用户",
    "desc.undrain": "恢复排空的 bot，仅超级用户",
    # --- parsing and permissions
    "unknown_sub": "没有子命令“{word}”。发送 {cmd} help 查看用法。",
    "unknown_flag": "{command} 没有选项 {flag}。用法：{usage}",
    "too_many_args": "参数太多。用法：{usage}",
    "missing_arg": "缺少参数。用法：{usage}",
    "option_value": "选项 {flag} 后面要写值。用法：{usage}",
    "bad_bot": "“{bot}”不是 bot 的号码。",
    "denied.superuser": "只有超级用户（SUPERUSERS）可以使用 {command}。",
    "denied.admin": "只有群主、群管理员和超级用户可以使用 {command}。",
    # --- the service
    "unreachable": "无法连接 auto-assign 服务（{error}）。",
    "rejected": "auto-assign 服务拒绝了请求（{error}）。",
    "rejected.token": "auto-assign 服务拒绝了令牌（{error}），请检查 AUTO_ASSIGN_TOKEN。",
    "rejected.forbidden": "auto-assign 服务不允许这个令牌做这件事（{error}）：修改命令要 admin 角色的"
    "令牌，请在服务的 api.tokens 中给 AUTO_ASSIGN_TOKEN 换成 admin 角色（插件平时的工作只需要 report）。",
    "failed": "出错了（{error}），详见 NoneBot 日志。",
    "list.sep": "、",
    # --- the service's refusals of an operator's request
    "refused.platform": "服务不知道平台 {platform}（AUTO_ASSIGN_PLATFORM），它还没有这个平台的 bot。",
    "refused.unknown_group": "服务不知道群 {group}：没有 bot 报告自己在这个群里。",
    "refused.unknown_bot": "服务不知道 bot {bot}。",
    "refused.not_member": "{bot} 不在群 {group} 里，只能固定到群里的 bot：{members}。",
    "refused.no_pin": "群 {group} 没有固定，也没有保持空。",
    "refused.no_drain": "{bot} 没有被排空。",
    "refused.until": "“{until}”不是有效的结束时间：写一段时长（如 2h、90m、1d 12h）或 RFC 3339 时间"
    "（如 2026-12-24T18:00:00+08:00），并且要在将来。",
    "refused.note": "备注不符合要求（{error}）。",
    "refused.follower": "这个服务实例不是主节点，转给主节点也没有成功（{error}）。请把 AUTO_ASSIGN_URL 指向主节点。",
    "refused.old_service": "这个 auto-assign 服务还没有固定、排空和预演的接口，请升级服务（{error}）。",
    "via_leader": "（AUTO_ASSIGN_URL 指向的是从节点，已由主节点 {api} 完成）",
    "not_stored": (
        "注意：这项更改已经生效，但服务的数据库 5 秒内没有保存它（见服务的 /healthz）。数据库恢复后"
        "会自动写入；服务在那之前停止的话，这项更改会丢失，届时请重新操作。"
    ),
    "release": "解除：{how}",
    "detail.until": "至 {when}",
    "detail.note": "备注：{note}",
    "detail.sep": "，",
    "detail.wrap": "，{details}",
    "when": "{time}（还有 {left}）",
    "when.past": "{time}（已到）",
    "left.seconds": "{n} 秒",
    "left.minutes": "{n} 分钟",
    "left.hours": "{n} 小时",
    "left.days": "{n} 天",
    # --- explain
    "explain.assignee": "群 {group}：由 {bot} 应答。",
    "explain.assignee_offline": "群 {group}：指定的 {bot} 不在线，每条消息由先抢到的 bot 应答。",
    "explain.nobody": "群 {group}：没有指定的 bot，每条消息由先抢到的 bot 应答。",
    "explain.held": "群 {group}：保持空，没有 bot 应答（@bot 的消息和 {cmd} 命令除外）。",
    "explain.pin_waiting": "运营者把它固定到 {bot}{details}，但 {bot} 现在不能应答（离线、排空或已退群），"
    "暂时按计划分配。",
    "explain.drained": "已排空：{bots}",
    "explain.assignee_drained": "{bot} 已排空，只因为没有别的 bot 能接手才留在这个群。",
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
    "reason.operator_pin": "运营者固定{details}",
    "reason.held": "运营者让它保持空{details}",
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
    "status.overrides": "运营者：固定 {pins} 个群，保持空 {holds} 个，排空 {drains} 个 bot（{cmd} pins、{cmd} drains）",
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
    # --- pins, holds, drains
    "pin.done": "已把群 {group} 固定到 {bot}{details}。",
    "hold.done": "群 {group} 已保持空：没有 bot 应答（@bot 的消息和 {cmd} 命令除外）{details}。",
    "unpin.done": "已取消群 {group} 到 {bot} 的固定，恢复按计划分配。",
    "unpin.done_hold": "群 {group} 不再保持空，恢复按计划分配。",
    "drain.done": "已排空 {bot}：它只保留别的 bot 接不了的群，不再分到新群{details}。",
    "undrain.done": "已恢复 {bot}，它又可以分到群了。",
    "pins.none": "没有固定或保持空的群。",
    "pins.title": "固定和保持空（{n} 个）：",
    "pins.in_force": "群 {group} → {bot}{details}",
    "pins.waiting": "群 {group} → {bot}（{bot} 现在不能应答，暂由 {assignee} 应答）{details}",
    "pins.waiting_nobody": "群 {group} → {bot}（{bot} 现在不能应答，暂时没有 bot 应答）{details}",
    "pins.held": "群 {group}：保持空{details}",
    "pins.release": "解除：{cmd} unpin -g 群号",
    "drains.none": "没有排空的 bot。",
    "drains.title": "排空（{n} 个）：",
    "drains.line": "{bot}：仍应答 {kept} 个群{details}",
    "drains.release": "恢复：{cmd} undrain <bot>",
    # --- the dry run
    "dry.title": "预演：重新分配会迁移 {moves} 个群（强制 {forced}，主动 {voluntary}）：",
    "dry.none": "预演：现在重新分配不会迁移任何群。",
    "dry.no_platform": "预演：服务没有平台 {platform} 的计划。",
    "dry.move": "群 {group}：{source} → {target}（{kind}，{rule}）",
    "dry.nobody": "无",
    "dry.more": "……另有 {n} 个",
    "dry.loads": "负载（前 → 后）：",
    "dry.load": "{bot}：{before} → {after}{marks}",
    "dry.marks": "（{marks}）",
    "dry.offline": "离线",
    "dry.drained": "已排空",
    "dry.sumsq": "Σ 负载²：{before} → {after}",
    "dry.weighted": "Σ（加权负载）²：{before} → {after}",
    "dry.apply": "这只是预演，什么都没有改变。要执行：{cmd} rebalance（仅超级用户）",
    "dry.nothing_changed": "这只是预演，什么都没有改变。",
    "kind.forced": "强制",
    "kind.voluntary": "主动",
    "kind.first": "首次分配",
    "rule.pin": "运营者固定",
    "rule.hold": "保持空",
    "rule.drain": "排空",
    "rule.bot-gone": "原来的 bot 不可用",
    "rule.priority": "channelBotPriority",
    "rule.no-valid-bot": "没有可用的 bot",
    "rule.balance": "负载均衡",
}

EN: dict[str, str] = {
    # --- help (``aa`` or ``aa help``) and usage lines
    "help.title": "auto-assign: one bot answers each group. Commands ({cmd}, or {alias}):",
    "help.line": "{usage} (or {aliases}): {desc}",
    "help.who": "Reading commands: {readers}; changing commands: superusers only.",
    "help.config": "Set AUTO_ASSIGN_URL and AUTO_ASSIGN_TOKEN (a token of the report role; the "
    "changing commands need admin) in .env; AUTO_ASSIGN_CA_FILE names the CA of an https "
    "service; AUTO_ASSIGN_LANGUAGE picks the replies' language (zh or en), "
    "AUTO_ASSIGN_READ_PERMISSION who may use the reading commands.",
    "who.everyone": "everyone",
    "who.admin": "group owners, group admins and superusers",
    "who.superuser": "superusers only",
    "usage.help": "{cmd} help",
    "usage.explain": "{cmd} explain [group]",
    "usage.status": "{cmd} status",
    "usage.rebalance": "{cmd} rebalance [--dry-run]",
    "usage.pins": "{cmd} pins",
    "usage.drains": "{cmd} drains",
    "usage.dry-run": "{cmd} dry-run",
    "usage.pin": "{cmd} pin [bot] [-g group] [--until 2h] [--note text]",
    "usage.hold": "{cmd} hold [-g group] [--until 2h] [--note text]",
    "usage.unpin": "{cmd} unpin [-g group]",
    "usage.drain": "{cmd} drain <bot> [--until 1d] [--note text]",
    "usage.undrain": "{cmd} undrain <bot>",
    "desc.help": "this help",
    "desc.explain": "who answers in the group and why (default: this group)",
    "desc.status": "load per bot, this process's bots, whether the service is reachable, "
    "the last rebalance",
    "desc.rebalance": "rebalance now, superusers only; with --dry-run only a preview (the moves, "
    "the loads before and after), nothing changes",
    "desc.pins": "the pinned and held groups",
    "desc.drains": "the drained bots",
    "desc.dry-run": "the same as rebalance --dry-run",
    "desc.pin": "pin a group (default: this one) to a bot (default: the bot that received the "
    "command); superusers only",
    "desc.hold": "hold a group: no bot answers there; superusers only",
    "desc.unpin": "release a group's pin or hold; superusers only",
    "desc.drain": "drain a bot: it keeps only the groups no other bot can take, and gets no new "
    "ones; superusers only",
    "desc.undrain": "end a bot's drain; superusers only",
    # --- parsing and permissions
    "unknown_sub": 'There is no subcommand "{word}". Send {cmd} help for the usage.',
    "unknown_flag": "{command} has no option {flag}. Usage: {usage}",
    "too_many_args": "Too many arguments. Usage: {usage}",
    "missing_arg": "An argument is missing. Usage: {usage}",
    "option_value": "The option {flag} needs a value. Usage: {usage}",
    "bad_bot": '"{bot}" is not a bot\'s number.',
    "denied.superuser": "Only superusers (SUPERUSERS) may use {command}.",
    "denied.admin": "Only group owners, group admins and superusers may use {command}.",
    # --- the service
    "unreachable": "The auto-assign service cannot be reached ({error}).",
    "rejected": "The auto-assign service refused the request ({error}).",
    "rejected.token": "The auto-assign service refused the token ({error}): check "
    "AUTO_ASSIGN_TOKEN.",
    "rejected.forbidden": "The auto-assign service does not let this token do that ({error}): "
    "the changing commands need a token of the admin role; give AUTO_ASSIGN_TOKEN the admin "
    "role in the service's api.tokens (the plugin's own work needs only report).",
    "failed": "Something went wrong ({error}); see NoneBot's log.",
    "list.sep": ", ",
    # --- the service's refusals of an operator's request
    "refused.platform": "The service does not know the platform {platform} "
    "(AUTO_ASSIGN_PLATFORM): it has no bot of it yet.",
    "refused.unknown_group": "The service does not know group {group}: no bot reported being "
    "in it.",
    "refused.unknown_bot": "The service does not know bot {bot}.",
    "refused.not_member": "{bot} is not in group {group}; a group can only be pinned to one of "
    "its bots: {members}.",
    "refused.no_pin": "Group {group} is neither pinned nor held.",
    "refused.no_drain": "{bot} is not drained.",
    "refused.until": '"{until}" is not a valid end: write a duration (2h, 90m, 1d 12h) or an '
    "RFC 3339 time (2026-12-24T18:00:00+08:00), in the future.",
    "refused.note": "The note was refused ({error}).",
    "refused.follower": "This service instance is not the leader, and sending the change on to "
    "the leader failed ({error}). Point AUTO_ASSIGN_URL at the leader.",
    "refused.old_service": "This auto-assign service has no pins, drains or dry runs yet: "
    "upgrade it ({error}).",
    "via_leader": "(AUTO_ASSIGN_URL points at a follower; the leader {api} made the change)",
    "not_stored": (
        "Note: this change is in force, but the service's database has not stored it within 5 s "
        "(see the service's /healthz). It is written once the database answers; if the service "
        "stops before that, the change is lost: make it again then."
    ),
    "release": "To release: {how}",
    "detail.until": "until {when}",
    "detail.note": "note: {note}",
    "detail.sep": ", ",
    "detail.wrap": ", {details}",
    "when": "{time} (in {left})",
    "when.past": "{time} (due)",
    "left.seconds": "{n} s",
    "left.minutes": "{n} min",
    "left.hours": "{n} h",
    "left.days": "{n} days",
    # --- explain
    "explain.assignee": "Group {group}: {bot} answers.",
    "explain.assignee_offline": "Group {group}: its bot {bot} is offline; each message goes to "
    "the first bot to claim it.",
    "explain.nobody": "Group {group}: no bot is assigned; each message goes to the first bot to "
    "claim it.",
    "explain.held": "Group {group}: held, no bot answers (but to an @mention and to {cmd} "
    "commands).",
    "explain.pin_waiting": "An operator pinned it to {bot}{details}, but {bot} cannot answer now "
    "(offline, drained or gone from the group): the plan serves it meanwhile.",
    "explain.drained": "Drained: {bots}",
    "explain.assignee_drained": "{bot} is drained and keeps this group only because no other bot "
    "can take it.",
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
    "reason.operator_pin": "pinned by an operator{details}",
    "reason.held": "held by an operator{details}",
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
    "status.overrides": "Operator: {pins} groups pinned, {holds} held, {drains} bots drained "
    "({cmd} pins, {cmd} drains)",
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
    # --- pins, holds, drains
    "pin.done": "Group {group} is pinned to {bot}{details}.",
    "hold.done": "Group {group} is held: no bot answers there (but to an @mention and to {cmd} "
    "commands){details}.",
    "unpin.done": "Group {group} is no longer pinned to {bot}; the plan assigns it again.",
    "unpin.done_hold": "Group {group} is no longer held; the plan assigns it again.",
    "drain.done": "{bot} is drained: it keeps only the groups no other bot can take, and gets no "
    "new ones{details}.",
    "undrain.done": "{bot} is no longer drained; it takes groups again.",
    "pins.none": "No group is pinned or held.",
    "pins.title": "Pinned and held ({n}):",
    "pins.in_force": "group {group} → {bot}{details}",
    "pins.waiting": "group {group} → {bot} ({bot} cannot answer now; {assignee} answers "
    "meanwhile){details}",
    "pins.waiting_nobody": "group {group} → {bot} ({bot} cannot answer now; no bot answers "
    "meanwhile){details}",
    "pins.held": "group {group}: held{details}",
    "pins.release": "To release: {cmd} unpin -g <group>",
    "drains.none": "No bot is drained.",
    "drains.title": "Drained ({n}):",
    "drains.line": "{bot}: still answers in {kept} groups{details}",
    "drains.release": "To end a drain: {cmd} undrain <bot>",
    # --- the dry run
    "dry.title": "Dry run: a rebalance would move {moves} groups ({forced} forced, {voluntary} "
    "voluntary):",
    "dry.none": "Dry run: a rebalance now would move no group.",
    "dry.no_platform": "Dry run: the service has no plan for the platform {platform}.",
    "dry.move": "group {group}: {source} → {target} ({kind}, {rule})",
    "dry.nobody": "nobody",
    "dry.more": "… and {n} more",
    "dry.loads": "Load (before → after):",
    "dry.load": "{bot}: {before} → {after}{marks}",
    "dry.marks": " ({marks})",
    "dry.offline": "offline",
    "dry.drained": "drained",
    "dry.sumsq": "Σ load²: {before} → {after}",
    "dry.weighted": "Σ (weighted load)²: {before} → {after}",
    "dry.apply": "Only a dry run: nothing changed. To apply it: {cmd} rebalance (superusers only)",
    "dry.nothing_changed": "Only a dry run: nothing changed.",
    "kind.forced": "forced",
    "kind.voluntary": "voluntary",
    "kind.first": "first",
    "rule.pin": "an operator's pin",
    "rule.hold": "a hold",
    "rule.drain": "drained",
    "rule.bot-gone": "its bot is gone",
    "rule.priority": "channelBotPriority",
    "rule.no-valid-bot": "no valid bot",
    "rule.balance": "balance",
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

    def left(self, seconds: float) -> str:
        """A time ahead, rounded to its largest unit (``2 小时``, ``90 min``)."""
        s = max(0.0, seconds)
        if s < 90:
            return self("left.seconds", n=round(s))
        if s < 90 * 60:
            return self("left.minutes", n=round(s / 60))
        if s < 36 * 3600:
            return self("left.hours", n=round(s / 3600))
        return self("left.days", n=round(s / 86400))

    def when(self, iso: str, now: float | None = None) -> str:
        """The service's RFC 3339 time (``2026-12-06T21:14:33Z``) in this host's time zone, to
        the minute, with how long until then."""
        try:
            moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
        except ValueError:
            return iso
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        shown = f"{moment.astimezone():%Y-%m-%d %H:%M}"
        left = moment.timestamp() - (time.time() if now is None else now)
        if left <= 0:
            return self("when.past", time=shown)
        return self("when", time=shown, left=self.left(left))
