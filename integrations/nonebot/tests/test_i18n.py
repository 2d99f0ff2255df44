"""The replies' catalogue: both languages have the same keys, with the same placeholders, and
every key the commands use exists."""

from __future__ import annotations

import re
import string
from datetime import datetime, timezone
from pathlib import Path
from typing import get_args

import pytest

SOURCE = Path(__file__).resolve().parent.parent / "src" / "nonebot_plugin_auto_assign"

# The service's explain reasons and rebalance causes (src/explain.rs, src/triggers.rs).
REASONS = (
    "unknown_channel",
    "platform_disabled",
    "excluded",
    "pinned",
    "operator_pin",
    "held",
    "only_member",
    "balanced",
    "no_valid_bot",
    "waiting_for_rebalance",
)
CAUSES = (
    "startup",
    "schedule",
    "config-changed",
    "bot-online",
    "bot-offline",
    "bot-status",
    "channel-joined",
    "channel-left",
    "requested",
    "takeover",
)
# A dry run's move kinds and rules (src/dry_run.rs).
KINDS = ("forced", "voluntary", "first")
RULES = ("pin", "hold", "drain", "bot-gone", "priority", "no-valid-bot", "balance")


def placeholders(text: str) -> set[str]:
    return {field for _, field, _, _ in string.Formatter().parse(text) if field is not None}


def test_both_languages_have_the_same_keys_and_placeholders() -> None:
    from nonebot_plugin_auto_assign.i18n import CATALOGUES, EN, LANGUAGES, ZH

    assert set(CATALOGUES) == set(LANGUAGES) == {"zh", "en"}
    assert sorted(ZH) == sorted(EN)
    differ = {k: (placeholders(ZH[k]), placeholders(EN[k])) for k in ZH if placeholders(ZH[k]) != placeholders(EN[k])}
    assert not differ
    for key in ZH:
        assert ZH[key].strip() and EN[key].strip(), key
        # Plain named placeholders only: {name}, no {0}, {} or {name.attr}.
        for field in placeholders(ZH[key]):
            assert re.fullmatch(r"[a-z_]+", field), (key, field)


def test_every_key_the_commands_use_exists() -> None:
    from nonebot_plugin_auto_assign.commands import SUBCOMMANDS
    from nonebot_plugin_auto_assign.config import Config
    from nonebot_plugin_auto_assign.i18n import ZH

    # Every dotted literal in the commands' code is a key ("status.service_ok"), and the
    # undotted keys are listed here.
    code = (SOURCE / "commands.py").read_text()
    used = set(re.findall(r'"([a-z_]+\.[a-z_-]+)"', code))
    assert {"explain.assignee", "status.service_ok", "status.stream_down", "denied.admin"} <= used
    used |= {"unknown_sub", "unknown_flag", "too_many_args", "unreachable", "rejected", "failed"}
    used |= {"missing_arg", "option_value", "bad_bot", "release", "via_leader", "not_stored"}
    for sub in SUBCOMMANDS:
        used |= {f"usage.{sub.name}", f"desc.{sub.name}"}
    readers = get_args(Config.model_fields["auto_assign_read_permission"].annotation)
    used |= {f"who.{r}" for r in readers}
    used |= {f"reason.{r}" for r in REASONS} | {f"cause.{c}" for c in CAUSES}
    used |= {f"kind.{k}" for k in KINDS} | {f"rule.{r}" for r in RULES}
    units = ("seconds", "minutes", "hours", "days")
    used |= {"list.sep", "help.config", "when", "when.past"}
    used |= {f"ago.{u}" for u in units} | {f"left.{u}" for u in units}
    assert not used - set(ZH), "missing"
    assert not set(ZH) - used, "not used"


@pytest.mark.parametrize("language", ["zh", "en"])
def test_texts_fill_in_and_translate(language: str) -> None:
    from nonebot_plugin_auto_assign.i18n import CATALOGUES, Texts

    t = Texts(language)  # type: ignore[arg-type]
    assert t("explain.assignee", group="6", bot="1002") == CATALOGUES[language]["explain.assignee"].replace(
        "{group}", "6"
    ).replace("{bot}", "1002")
    causes = t.causes("bot-offline, channel-joined ×50, some-new-cause")
    words = causes.split(t("list.sep"))
    assert words == [t("cause.bot-offline"), f"{t('cause.channel-joined')} ×50", "some-new-cause"]
    assert t.ago(5) == t("ago.seconds", n=5)
    assert t.ago(600) == t("ago.minutes", n=10)
    assert t.ago(3 * 3600) == t("ago.hours", n=3)
    assert t.ago(3 * 86400) == t("ago.days", n=3)
    # The end of a pin or drain: this host's local time to the minute, and how long until then.
    iso = "2026-12-06T21:14:33Z"
    end = datetime(2026, 12, 6, 21, 14, 33, tzinfo=timezone.utc)
    local = f"{end.astimezone():%Y-%m-%d %H:%M}"
    now = end.timestamp() - 2 * 3600
    assert t.when(iso, now=now) == t("when", time=local, left=t("left.hours", n=2))
    assert t.when(iso, now=now + 3 * 3600) == t("when.past", time=local)
    assert t.left(90 * 60 - 1) == t("left.minutes", n=90)
    assert t.when("not a time") == "not a time"


def test_language_setting() -> None:
    from nonebot.compat import type_validate_python
    from pydantic import ValidationError

    from nonebot_plugin_auto_assign import Config

    assert Config().auto_assign_language == "zh"
    for value, language in (("en", "en"), ("zh", "zh"), ("zh-CN", "zh"), ("zh_Hans", "zh"), ("EN-us", "en")):
        c = type_validate_python(Config, {"auto_assign_language": value})
        assert c.auto_assign_language == language, value
    with pytest.raises(ValidationError):
        type_validate_python(Config, {"auto_assign_language": "fr"})
    with pytest.raises(ValidationError):
        type_validate_python(Config, {"auto_assign_read_permission": "nobody"})
