"""A process's memory maps as MMAP records change them (perf's maps.c
maps__fixup_overlappings): a new map cuts what it overlaps out of the maps before it,
which keep the parts outside it. UserResolver.mmap changes only the stretch of maps the
new one overlaps; here it is checked against that rule applied to the whole list."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bpfsym.symbolize.symbolizer import Symbolizer
from bpfsym.symbolize.user import MapEntry


def whole_list(maps: list[MapEntry], start: int, length: int, pgoff: int, name: str) -> list:
    """The rule, on every map: kept as it is, or cut to what lies outside the new one;
    the new one added; all ordered by start (ties: as they were, the new one last)."""
    end = start + length
    out = []
    for m in maps:
        if start < m.end and m.start < end:  # overlapped: what lies outside the new one stays
            left = MapEntry(m.start, start, m.pgoff, m.filename, m.build_id)
            right = MapEntry(end, m.end, m.pgoff + end - m.start, m.filename, m.build_id)
            out += [part for part in (left, right) if part.start < part.end]
        else:
            out.append(m)
    out.append(MapEntry(start, end, pgoff, name, ""))
    return sorted(out, key=lambda m: m.start)


# small addresses so that maps overlap, touch, nest and share starts often; some empty
MMAPS = st.lists(
    st.tuples(
        st.integers(0, 64),
        st.sampled_from([0, 0, 1, 2, 3, 5, 8, 16, 40]),
        st.integers(0, 1 << 20),
    ),
    max_size=40,
)


@settings(max_examples=400, deadline=None)
@given(MMAPS)
def test_mmap_cuts_what_the_new_map_overlaps(records):
    sym = Symbolizer(None, "")
    want: list[MapEntry] = []
    for k, (start, length, pgoff) in enumerate(records):
        name = f"/lib/f{k}.so"
        sym.mmap(7, start, length, pgoff, name, "")
        want = whole_list(want, start, length, pgoff, name)
        assert sym.maps[7] == want
        assert sym.map_starts[7] == [m.start for m in want]


def test_a_library_mapped_whole_then_in_parts():
    # what ld.so does: the whole range first, then each segment inside it
    sym = Symbolizer(None, "")
    sym.mmap(1, 0x1000, 0x5000, 0, "/lib/libc.so.6", "")
    sym.mmap(1, 0x2000, 0x1000, 0x1000, "/lib/libc.so.6", "")
    sym.mmap(1, 0x9000, 0x1000, 0, "/bin/x", "")
    got = [(m.start, m.end, m.pgoff) for m in sym.maps[1]]
    assert got == [
        (0x1000, 0x2000, 0),
        (0x2000, 0x3000, 0x1000),
        (0x3000, 0x6000, 0x2000),
        (0x9000, 0xA000, 0),
    ]
