"""The selfManaged mode's decisions (webhook/certificates/rotation.py): renewal timing, bundle
merging, and each step of a renewal, on a simulated clock and simulated webhook configurations.

`World` plays what the API server and the replicas do between decisions: the Secret applies a
Change, the configurations take the Secret's ca.crt when a replica publishes it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import pytest
from cryptography import x509
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.certificates.create import (
    CA_FILE,
    CA_KEY_FILE,
    CERT_FILE,
    KEY_FILE,
    KeyPair,
    make_ca,
    make_serving_cert,
)
from webhook.certificates.rotation import (
    ISSUED_AT,
    RENEW,
    RENEWED,
    TRUSTED_AT,
    Change,
    Plan,
    Stored,
    merge_bundle,
    next_change,
    parse_bundle,
    pem,
    public_data,
    read_secret,
    renewal_due,
)

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
NAMES = (
    "tpu-webhook",
    "tpu-webhook.sys",
    "tpu-webhook.sys.svc",
    "tpu-webhook.sys.svc.cluster.local",
)
PLAN = Plan(
    dns_names=NAMES,
    ca_days=365,
    cert_days=90,
    propagation=dt.timedelta(seconds=60),
    overlap=dt.timedelta(seconds=600),
)
SECOND = dt.timedelta(seconds=1)


def ca_valid(days: float, now: dt.datetime = T0) -> x509.Certificate:
    return make_ca("test-ca", days=days, now=now).certificate


# ----------------------------------------------------------------------- renewal timing


@pytest.mark.parametrize(
    ("elapsed", "due"),
    [
        (dt.timedelta(0), False),
        (dt.timedelta(days=243), False),  # 365 days (+5 min backdating): a third left at 243.3
        (dt.timedelta(days=243, hours=12), True),
        (dt.timedelta(days=365), True),
        (dt.timedelta(days=400), True),  # expired: due all the more
    ],
)
def test_a_certificate_is_due_for_renewal_once_a_third_of_its_life_is_left(
    elapsed: dt.timedelta, due: bool
) -> None:
    assert renewal_due(ca_valid(365), T0 + elapsed) is due


def test_the_renewal_point_scales_with_the_lifetime() -> None:
    short = ca_valid(3)  # 3 days + 5 minutes backdated: due a third (1 day 1 min 40 s) before
    assert not renewal_due(short, T0 + dt.timedelta(days=2, seconds=-101))
    assert renewal_due(short, T0 + dt.timedelta(days=2, seconds=-100))


# ----------------------------------------------------------------------- bundle merging


def test_merging_keeps_the_order_and_each_ca_once() -> None:
    a, b, c = ca_valid(10), ca_valid(20), ca_valid(30)
    assert merge_bundle([a, b], [b, c], T0) == (a, b, c)


def test_merging_drops_expired_cas() -> None:
    old, new = ca_valid(1), ca_valid(30)
    assert merge_bundle([old], [new], T0 + dt.timedelta(days=2)) == (new,)


def test_a_bundle_round_trips_through_pem_and_ignores_duplicates_and_garbage() -> None:
    a, b = ca_valid(10), ca_valid(20)
    assert parse_bundle(pem([a, b, a])) == [a, b]
    assert parse_bundle(b"not a certificate") == []
    assert parse_bundle(b"") == []


# ------------------------------------------------------------------- the world, simulated


@dataclass
class World:
    """A Secret, the configurations' caBundles and a clock; replicas publish on `publish()`."""

    now: dt.datetime = T0
    data: dict[str, bytes] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    published: tuple[x509.Certificate, ...] = ()  # what both configurations trust

    @property
    def stored(self) -> Stored:
        return read_secret(self.data, self.annotations)

    def decide(self) -> Change | None:
        return next_change(self.stored, [set(self.published)] * 2, self.now, PLAN)

    def apply(self, change: Change) -> None:
        self.data = {k: v for k, v in change.data.items() if v}
        for key, value in change.annotations.items():
            if value is None:
                self.annotations.pop(key, None)
            else:
                self.annotations[key] = value

    def step(self) -> list[str]:
        """One replica's pass: publish, then write until nothing is needed (the reasons)."""
        reasons = []
        for _ in range(10):
            self.publish()
            change = self.decide()
            if change is None:
                return reasons
            reasons.append(change.reason)
            self.apply(change)
        raise AssertionError(f"no fixed point: {reasons}")

    def publish(self) -> None:
        self.published = self.stored.cas

    def later(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)

    def leaf(self) -> x509.Certificate:
        leaf = self.stored.leaf()
        assert leaf is not None
        return leaf

    def issuer(self) -> x509.Certificate:
        issuer = self.stored.issuer(self.leaf())
        assert issuer is not None
        return issuer


def installed() -> World:
    world = World()
    assert world.step() == ["first CA and serving certificate"]
    return world


def test_an_empty_secret_gets_a_ca_and_a_certificate_for_the_service_names_at_once() -> None:
    world = World()
    change = world.decide()
    assert change is not None
    assert change.reason == "first CA and serving certificate"
    world.apply(change)
    (ca,) = world.stored.cas
    assert world.issuer() == ca
    sans = world.leaf().extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert tuple(sans.get_values_for_type(x509.DNSName)) == NAMES
    assert world.annotations[ISSUED_AT] == "2030-01-01T00:00:00.000Z"
    assert set(world.data) == {CA_FILE, CA_KEY_FILE, CERT_FILE, KEY_FILE}


def test_a_settled_secret_needs_nothing() -> None:
    world = installed()
    world.later(3600)
    assert world.decide() is None


def test_a_forced_renewal_walks_through_every_step_in_order() -> None:
    world = installed()
    old_ca, old_leaf = world.issuer(), world.leaf()
    world.annotations[RENEW] = "now"
    change = world.decide()
    assert change is not None
    assert change.reason == "renewal requested (tpu-webhook.io/renew=now): new CA staged"
    world.apply(change)
    assert world.annotations[RENEWED] == "now"
    old, new = world.stored.cas
    assert old == old_ca
    assert world.leaf() == old_leaf  # nothing is served from the new CA yet
    assert world.decide() is None  # it waits for the caBundles
    world.publish()
    change = world.decide()
    assert change is not None
    assert change.reason == "signing CA is in every caBundle"
    world.apply(change)
    world.later(59)
    assert world.decide() is None  # propagation: 60 s
    world.later(1)
    change = world.decide()
    assert change is not None
    assert change.reason == "serving certificate from the new CA"
    world.apply(change)
    assert world.issuer() == new
    assert world.stored.cas == (old, new)
    assert TRUSTED_AT not in world.annotations
    world.later(599)
    assert world.decide() is None  # overlap: 600 s
    world.later(1)
    change = world.decide()
    assert change is not None
    assert change.reason == "older CAs retired"
    world.apply(change)
    assert world.stored.cas == (new,)
    assert world.decide() is None


def test_the_wait_starts_again_when_a_re_apply_drops_the_new_ca_from_a_ca_bundle() -> None:
    world = installed()
    world.annotations[RENEW] = "1"
    world.step()
    assert TRUSTED_AT in world.annotations
    world.later(30)
    world.published = world.stored.cas[:1]  # e.g. a configuration re-applied with the old bundle
    change = world.decide()
    assert change is not None
    assert change.reason == "signing CA missing from a caBundle again"
    world.apply(change)
    world.publish()
    world.step()
    started = dt.datetime.fromisoformat(world.annotations[TRUSTED_AT])
    assert started == world.now
    world.later(59)
    assert world.decide() is None


def test_a_renewal_requested_during_one_is_answered_by_it() -> None:
    world = installed()
    world.annotations[RENEW] = "1"
    world.step()
    world.annotations[RENEW] = "2"
    change = world.decide()
    assert change is not None
    assert change.reason == "renewal requested: the one under way answers it"
    world.apply(change)
    assert len(world.stored.cas) == 2
    assert world.annotations[RENEWED] == "2"


def test_the_ca_is_renewed_when_a_third_of_its_life_is_left() -> None:
    world = installed()
    world.later(dt.timedelta(days=244).total_seconds())
    reasons = world.step()
    assert reasons[0] == "CA renewal due: new CA staged"
    assert len(world.stored.cas) == 2


def test_the_certificate_is_renewed_by_the_same_ca_without_waiting() -> None:
    world = installed()
    ca = world.issuer()
    first = world.leaf()
    world.later(dt.timedelta(days=61).total_seconds())
    assert world.step() == ["serving certificate renewal due"]
    assert world.leaf() != first
    assert world.issuer() == ca
    assert world.stored.cas == (ca,)


def test_a_certificate_lacking_a_service_name_is_issued_again() -> None:
    world = installed()
    ca = KeyPair(world.data[CA_FILE], world.data[CA_KEY_FILE])
    other = make_serving_cert(ca, ["old-name"], now=world.now)
    world.data[CERT_FILE], world.data[KEY_FILE] = other.cert_pem, other.key_pem
    assert world.step() == ["serving certificate renewal due"]


def test_a_wiped_secret_keeps_the_trusted_ca_until_a_new_certificate_is_served() -> None:
    world = installed()
    served_ca = world.issuer()
    world.data, world.annotations = {}, {}  # e.g. the Secret deleted and applied again, empty
    change = world.decide()
    assert change is not None
    assert change.reason.startswith("no usable CA in the Secret: new CA staged")
    world.apply(change)
    old, new = world.stored.cas
    assert old == served_ca
    assert CERT_FILE not in world.data  # no certificate until the new CA is trusted everywhere
    world.step()
    world.later(60)
    assert world.step() == ["serving certificate from the new CA"]
    assert world.issuer() == new


# ----------------------------------------------------------------- the CA-only Secret


def test_the_ca_only_secret_gets_the_cas_of_the_secret_and_nothing_else() -> None:
    world = installed()
    assert public_data(world.stored, {}) == {CA_FILE: world.data[CA_FILE]}
    assert public_data(world.stored, {CA_FILE: world.data[CA_FILE]}) is None  # already so
    # A key someone put there goes: the Secret the collector reads never holds one.
    extra = {CA_FILE: world.data[CA_FILE], KEY_FILE: world.data[KEY_FILE]}
    assert public_data(world.stored, extra) == {CA_FILE: world.data[CA_FILE]}


def test_the_ca_only_secret_follows_a_renewal_with_both_cas_then_one() -> None:
    world = installed()
    world.annotations[RENEW] = "1"
    world.step()
    old, new = world.stored.cas
    assert public_data(world.stored, {CA_FILE: pem([old])}) == {CA_FILE: pem([old, new])}
    world.later(60)
    world.step()
    world.later(600)
    world.step()
    assert world.stored.cas == (new,)
    assert public_data(world.stored, {CA_FILE: pem([old, new])}) == {CA_FILE: pem([new])}


def test_nothing_is_copied_before_the_secret_has_a_ca() -> None:
    assert public_data(World().stored, {}) is None


def test_an_annotation_time_without_a_zone_is_utc_and_a_bad_one_is_none() -> None:
    stored = Stored(annotations={TRUSTED_AT: "2030-01-01T00:00:00", ISSUED_AT: "yesterday"})
    assert stored.time(TRUSTED_AT) == T0
    assert stored.time(ISSUED_AT) is None


def test_a_ca_whose_key_is_not_ca_key_is_no_signer() -> None:
    world = installed()
    world.data[CA_KEY_FILE] = make_ca().key_pem
    assert world.stored.signer(world.now) is None


# ------------------------------------------------------------- the invariant, any history


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(min_value=1, max_value=400_000), st.booleans()),
        min_size=1,
        max_size=25,
    )
)
def test_no_history_serves_an_untrusted_certificate_or_drops_a_ca_too_soon(
    history: list[tuple[int, bool]],
) -> None:
    """Whatever the timing of renewal requests and of the clock: a certificate only comes from a
    CA trusted for `propagation`, and a CA leaves the bundle only `overlap` after the last
    certificate it signed was replaced."""
    world = installed()
    trusted_since = {world.issuer(): world.now - PLAN.propagation}
    replaced_at: dict[x509.Certificate, dt.datetime] = {}
    for seconds, renew in history:
        world.later(seconds)
        if renew:
            world.annotations[RENEW] = str(world.now)
        before = world.issuer()
        for _ in range(10):
            world.publish()
            for ca in world.published:
                trusted_since.setdefault(ca, world.now)
            cas = set(world.stored.cas)
            change = world.decide()
            if change is None:
                break
            world.apply(change)
            issuer = world.issuer()
            assert world.now - trusted_since[issuer] >= PLAN.propagation
            if issuer != before:
                replaced_at[before] = world.now
                before = issuer
            for gone in cas - set(world.stored.cas):
                assert gone in replaced_at  # a CA leaves only after a newer one took over
                assert world.now - replaced_at[gone] >= PLAN.overlap
