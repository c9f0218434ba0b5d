"""What every driver is handed: a launch request checked once, when it is made."""

from __future__ import annotations

import pytest

from elasticsite.clouds.base import SITE_TAG, WORKER_TAG, CloudError, LaunchRequest
from elasticsite.model import VMType

SMALL = VMType("small", 1)


def test_names_keep_their_order_without_repeats() -> None:
    request = LaunchRequest(SMALL, ["w2", "w1", "w2", "w3", "w1"])
    assert request.names == ("w2", "w1", "w3")
    assert request.userdata == {} and request.tags == {}


@pytest.mark.parametrize("names", ["w1", ["w1", ""], ["w1", None], [3]])
def test_a_malformed_list_of_names_is_refused_before_any_driver_sees_it(names: object) -> None:
    with pytest.raises(ValueError, match="launch: "):
        LaunchRequest(SMALL, names)  # type: ignore[arg-type]


def test_the_request_keeps_its_own_copy_of_what_it_was_given() -> None:
    names, userdata, tags = ["w1"], {"node": "w1"}, {WORKER_TAG: "w1"}
    request = LaunchRequest(SMALL, names, userdata, tags)
    names.append("w2")
    userdata["secret"] = "s"
    tags[SITE_TAG] = "elsewhere"
    assert request.names == ("w1",)
    assert request.userdata == {"node": "w1"} and request.tags == {WORKER_TAG: "w1"}


def test_site_tags_add_the_site_and_refuse_another_sites_launch() -> None:
    ours = LaunchRequest(SMALL, ["w1"], tags={WORKER_TAG: "w1"})
    assert ours.site_tags("aws", "s1") == {WORKER_TAG: "w1", SITE_TAG: "s1"}
    assert LaunchRequest(SMALL, ["w1"], tags={SITE_TAG: "s1"}).site_tags("aws", "s1") == {
        SITE_TAG: "s1"
    }
    theirs = LaunchRequest(SMALL, ["w1"], tags={SITE_TAG: "s2"})
    with pytest.raises(CloudError, match="cloud aws: launch: tags name another site"):
        theirs.site_tags("aws", "s1")
