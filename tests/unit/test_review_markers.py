"""The TPU-marker scan that lets a non-TPU review skip decoding its object."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from webhook.admission.review import TPU_MARKERS, has_tpu_marker

# Pieces of the markers and near misses, so generated bodies often hold, or almost hold, one.
PIECES = [b"tpu", b"google.com/", b"google.com/tp", b"gke-", b"gke-tpu", b"-", b"/", b"x", b'"']


@given(st.lists(st.sampled_from(PIECES), max_size=12).map(b"".join))
def test_the_scan_finds_a_marker_exactly_when_one_is_there(body: bytes) -> None:
    assert has_tpu_marker(body) == any(marker in body for marker in TPU_MARKERS)


def test_markers_at_the_edges_of_the_body() -> None:
    for marker in TPU_MARKERS:
        assert has_tpu_marker(marker)
        assert has_tpu_marker(b"{" + marker)
        assert not has_tpu_marker(marker[:-1])
        assert not has_tpu_marker(marker[1:])
    assert not has_tpu_marker(b"tpu-job tpu gke-tpu google.com tpu")
