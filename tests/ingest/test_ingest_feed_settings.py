"""The feed's settings: a hub of its own, a way to reach it and checkpoints, or one clear line and exit 2."""

from __future__ import annotations

import pytest

from ingest import cli
from ingest.settings import load
from sevents.errors import ConfigError

CHECKPOINTS = {"SEVENTS_CHECKPOINT_CONNECTION_STRING": "UseDevelopmentStorage=true"}


def test_the_feed_beside_or_alone_is_accepted() -> None:
    """--feed-eventhub beside the collectors' hub, and --source feed alone, with a namespace and checkpoints."""
    flags = {"source": "eventhubs", "eventhubs_namespace": "ns.servicebus.windows.net", "feed_eventhub": "se-feed"}
    beside = load(file=None, env=CHECKPOINTS, flags=flags)
    assert (beside.feed_eventhub, beside.feed_consumer_group) == ("se-feed", "sevents-ingest")
    alone = load(file=None, env=CHECKPOINTS, flags={**flags, "source": "feed"})
    assert alone.source == "feed"


@pytest.mark.parametrize(
    ("flags", "env", "says"),
    [
        ({"source": "feed"}, CHECKPOINTS, "source feed needs feed_eventhub"),
        (
            {"source": "eventhubs", "eventhubs_namespace": "ns", "feed_eventhub": "scheduled-events"},
            CHECKPOINTS,
            "is the collectors' hub",
        ),
        ({"feed_eventhub": "se-feed"}, CHECKPOINTS, "feed_eventhub needs eventhubs_namespace"),
        ({"feed_eventhub": "se-feed", "eventhubs_namespace": "ns"}, {}, "feed_eventhub needs checkpoint_blob_url"),
    ],
)
def test_what_the_feed_lacks_is_named(flags: dict[str, str], env: dict[str, str], says: str) -> None:
    """Each missing piece is a problem that names it."""
    with pytest.raises(ConfigError) as raised:
        load(file=None, env=env, flags=flags)
    assert says in str(raised.value)


def test_the_cli_refuses_a_feed_without_its_hub_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """``run --source feed`` without --feed-eventhub: exit 2, one line on stderr, no traceback; --help names it."""
    assert cli.main(["run", "--source", "feed", "--clickhouse", "chdb:///tmp/unused-feed-dir"]) == 2
    err = capsys.readouterr().err
    assert "feed_eventhub" in err and "Traceback" not in err
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    assert "--feed-eventhub NAME" in capsys.readouterr().out
