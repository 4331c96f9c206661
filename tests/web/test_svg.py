"""The SVG pictures: colours by count, links, and escaped labels."""

from __future__ import annotations

from datetime import UTC, datetime

from xidpipe.web.svg import HEAT, gpu_timeline_svg, heat_colour, heatmap_svg


def test_heat_colours_rise_with_the_count() -> None:
    assert [heat_colour(n) for n in (0, 1, 2, 3, 4, 5, 9, 10, 500)] == [
        HEAT[0], HEAT[1], HEAT[2], HEAT[3], HEAT[3], HEAT[4], HEAT[4], HEAT[5], HEAT[5]]


def test_heatmap_cells_link_to_the_nodes_incidents_and_escape_labels() -> None:
    svg = str(heatmap_svg(["2026-11-27", "2026-11-28"], [{"node": 'n<1>&"x', "counts": [0, 3]}]))
    assert 'n<1>' not in svg and "n&lt;1&gt;&amp;&#34;x" in svg
    assert 'data-day="2026-11-28" data-count="3"' in svg and f'fill="{HEAT[3]}"' in svg
    assert "/incidents?node=n%3C1%3E%26%22x&amp;since=2026-11-28&amp;until=2026-11-29" in svg
    assert svg.count("<a ") == 1  # an empty cell links nowhere
    assert "No hardware incidents" in str(heatmap_svg(["2026-11-27"], []))


def test_gpu_timeline_places_incidents_on_the_placement_that_held_the_card() -> None:
    placements = [
        {"node": "node-a", "pci_slot": "0000:18:00.0", "valid_from": "2026-11-01T00:00:00+00:00",
         "valid_to": "2026-11-10T00:00:00+00:00", "uuid": "GPU-1"},
        {"node": "node-b", "pci_slot": "0000:3b:00.0", "valid_from": "2026-11-12T00:00:00+00:00", "valid_to": None},
    ]
    incidents = [
        {"incident_id": "v1:a", "first_seen": "2026-11-05T00:00:00+00:00", "node": "node-a", "category": "hardware",
         "codes": ["Xid 79"]},
        {"incident_id": "v1:<b>", "first_seen": "2026-11-11T00:00:00+00:00", "node": "node-x",
         "category": "application", "codes": ["Xid 13"]},
    ]
    svg = str(gpu_timeline_svg(placements, incidents, now=datetime(2026, 11, 20, tzinfo=UTC)))
    assert svg.count('class="placement"') == 2 and svg.count('class="incident-mark"') == 2
    assert "other placements" in svg  # the second incident happened where the ledger did not have the card
    assert "v1:&lt;b&gt;" in svg and "<b>" not in svg
    assert 'fill="#c62828"' in svg and 'fill="#f0a202"' in svg
    assert "No placements" in str(gpu_timeline_svg([], []))


def test_bars_scale_to_the_longest_and_say_na_without_a_value() -> None:
    from xidpipe.web.svg import BAR_W, bars_svg, duration_text

    svg = str(bars_svg([("train", 7200.0), ('<p>&"', 3600.0), ("", None)], "mean time to resolve"))
    assert f'width="{BAR_W}" height' in svg and f'width="{BAR_W // 2}" height' in svg
    assert "&lt;p&gt;&amp;&#34;" in svg and "<p>" not in svg
    assert svg.count("<rect") == 2 and "(no pool known)" in svg and ">n/a<" in svg
    assert "No hardware incidents" in str(bars_svg([], "x"))
    assert [duration_text(s) for s in (45, 720, 19800, 276480)] == ["45s", "12m", "5.5h", "3.2d"]
