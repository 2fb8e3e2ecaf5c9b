"""The power governor's law as tables: engagement, bumpless start, dead zone, integration rules, the unbound
hold, the floor, reversal backlash and the jump to the integrator, release, idle restore, no temperature.

A 150 W card (default = original = 150 W, floor 90 W) with the default [power] settings; the cap in
force follows every write, as the controller's verified writes make it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gpuwatch.config.cooling import PowerConfig
from gpuwatch.power.governor import (
    Decision,
    GovernorInputs,
    GovernorState,
    decide,
    floor_cap_w,
    governor_params,
)

P = governor_params(PowerConfig())
CAP_W, FLOOR_W = 150.0, 90.0


@dataclass
class Loop:
    """Feeds the law tick by tick; the cap in force is what it last wrote."""

    cap_w: float = CAP_W
    original_w: float = CAP_W
    state: GovernorState = field(default_factory=GovernorState)
    writes: list[float] = field(default_factory=list)

    def tick(self, now: float, headroom_c: float | None, *, can_rise: bool = False, power_w: float | None = None,
             ) -> Decision:
        power = self.cap_w if power_w is None else power_w  # a training card draws all the cap allows
        d = decide(P, self.state, GovernorInputs(
            now=now, headroom_c=headroom_c, fan_can_rise=can_rise, power_w=power, cap_w=self.cap_w,
            original_cap_w=self.original_w, default_cap_w=CAP_W, floor_cap_w=FLOOR_W))
        self.state = d.state
        if d.write:
            self.writes.append(d.cap_w)
            self.cap_w = d.cap_w
        return d

    def run(self, start: float, end: float, headroom_c: float, **kw: object) -> Decision:
        d = self.tick(start, headroom_c, **kw)  # type: ignore[arg-type]
        now = start
        while now < end:
            now += 1
            d = self.tick(now, headroom_c, **kw)  # type: ignore[arg-type]
        return d


@pytest.mark.parametrize(
    "can_rise, headroom_c, phase",
    [
        (True, 1.0, "idle"),  # the fan can still rise: the fan's job, the governor waits (pause as before)
        (True, -3.0, "idle"),  # even over the limit: the pause's job
        (False, 12.0, "idle"),  # fan at its top but far from the limit
        (False, 8.5, "idle"),
        (False, 8.0, "governing"),  # engage_margin_c
        (False, 3.0, "governing"),
    ],
)
def test_engages_only_when_the_fan_cannot_rise_and_the_limit_is_near(can_rise: bool, headroom_c: float,
                                                                       phase: str) -> None:
    d = Loop().tick(0, headroom_c, can_rise=can_rise)
    assert d.state.phase == phase
    assert d.pause_allowed == (phase == "idle")
    if phase == "idle":
        assert (d.cap_w, d.write) == (CAP_W, False)


def test_bumpless_start_from_the_power_drawn_and_p_term_pulls_down() -> None:
    loop = Loop()
    d = loop.tick(0, 6.0, power_w=140.0)
    # u starts at power + 3 % of the default (144.5 W), the integrator 7.5 W/°C x (4 - 0.5) °C below it.
    assert d.state.output_w == pytest.approx(144.5)
    assert d.state.integral_w == pytest.approx(144.5 - 7.5 * 3.5)
    assert (d.cap_w, d.write) == (144.0, True)
    # 2 °C hotter: within the 6 s filter's reach the P term alone cuts ~15 W (7.5 W/°C), long before
    # the integrator (0.1 W/(°C s)) could.
    d = loop.run(1, 20, 4.0)
    assert loop.cap_w <= 135.0 and d.state.integral_w == pytest.approx(118.25, abs=3.0)


def test_dead_zone_holds_the_cap_on_noise() -> None:
    loop = Loop()
    loop.run(0, 60, 0.0)
    loop.run(61, 400, 2.0)  # settled at the set point (headroom 2 °C = hold_margin_c)
    before = list(loop.writes)
    for i, noise in enumerate([0.4, -0.4, 0.3, -0.2, 0.45, -0.45] * 20):
        loop.tick(401 + i, 2.0 + noise)
    assert loop.writes == before


def test_too_hot_integrates_down_to_the_floor_and_allows_the_pause() -> None:
    loop = Loop()
    d = loop.tick(0, 7.0)
    assert not d.pause_allowed
    d = loop.run(1, 600, -1.0)  # 1 °C over the limit for ten minutes: nothing holds it
    assert (d.cap_w, d.at_floor, d.pause_allowed) == (FLOOR_W, True, True)
    assert loop.writes[-1] == FLOOR_W and all(a > b for a, b in zip(loop.writes, loop.writes[1:], strict=False))


def test_no_upward_integration_far_below_the_set_point() -> None:
    loop = Loop()
    loop.run(0, 600, 0.0)  # too hot for long: the integrator has come down
    low = loop.state.integral_w
    assert low is not None and low < 120
    # After an eval the card is far below the limit: warm-up room, not real room. The P term may lift
    # the cap for the warm-up; the integrator (the cap that holds the limit) stays where it was.
    loop.run(601, 601 + P.release_after_s - 2, 12.0)
    assert loop.state.integral_w is not None and loop.state.integral_w - low < 1.0
    # Room that has lasted release_after_s is real (ambient fell, a lighter load): now it integrates up.
    loop.run(601 + P.release_after_s - 1, 601 + P.release_after_s + 30, 12.0)
    assert loop.state.integral_w is not None and loop.state.integral_w - low > 3.0


def test_unbound_cap_holds_what_it_learned() -> None:
    loop = Loop()
    loop.run(0, 120, 0.0)
    learned = loop.cap_w
    assert learned < CAP_W
    d = loop.run(121, 180, 15.0, power_w=25.0)  # evaluation: the card idles far below the cap
    assert (d.cap_w, d.write, d.state.phase) == (learned, False, "governing")


def test_idle_restore_after_the_cap_stopped_binding() -> None:
    loop = Loop()
    loop.run(0, 120, 0.0)
    d = loop.run(121, 121 + P.idle_restore_after_s - 1, 15.0, power_w=25.0)
    assert d.state.phase == "governing" and loop.cap_w < CAP_W
    d = loop.tick(121 + P.idle_restore_after_s, 15.0, power_w=25.0)
    assert (d.state.phase, d.cap_w, d.write, d.pause_allowed) == ("idle", CAP_W, True, True)


def test_release_once_the_original_has_held_with_room() -> None:
    loop = Loop()
    loop.tick(0, 2.0)  # engaged at the set point: nothing to cut
    phases = [(t, loop.tick(t, 4.0)) for t in range(1, 320)]  # then 2 °C of room, at the original
    released = [t for t, d in phases if d.state.phase == "idle"]
    assert released and P.release_after_s <= released[0] <= P.release_after_s + 5
    assert all(d.pause_allowed for t, d in phases if t == released[0])
    assert loop.writes == []


def test_reversal_needs_the_larger_step_then_jumps_to_the_integrator() -> None:
    loop = Loop()
    loop.run(0, 60, -1.0)  # down, several writes
    assert loop.state.last_direction == -1
    low, writes = loop.cap_w, len(loop.writes)
    # Slightly cool (the P term alone would give back ~4 W): a 3 W step up is a reversal, needs 6 W.
    d = loop.tick(61, 3.1)
    assert not d.write and loop.cap_w == low
    d = loop.run(62, 200, 5.0)  # clearly cool and binding: the reversal goes to round(I) at once
    assert len(loop.writes) > writes and loop.writes[writes] - low >= 6
    assert loop.state.last_direction == 1


def test_no_temperature_holds_and_allows_the_pause() -> None:
    loop = Loop()
    loop.run(0, 120, 0.0)
    held = loop.cap_w
    d = loop.tick(121, None)
    assert (d.cap_w, d.write, d.pause_allowed, d.state.phase) == (held, False, True, "governing")


def test_a_lowered_cap_in_force_while_idle_goes_back() -> None:
    """A restart after a SIGKILL: the killed daemon's cap is in force, the governor is idle."""
    loop = Loop(cap_w=112.0)
    d = loop.tick(0, 30.0, can_rise=True)
    assert (d.cap_w, d.write) == (CAP_W, True)


def test_an_original_in_fractional_watts_comes_back_exactly() -> None:
    loop = Loop(cap_w=312.5, original_w=312.5)
    d = loop.tick(0, 30.0, can_rise=True)
    assert (d.cap_w, d.write) == (312.5, False)


@pytest.mark.parametrize(
    "default_w, cap_min_w, original_w, floor_w",
    [
        (150, 75, 150, 90),  # 60 % of the default
        (289, 0, 289, 174),  # power1_cap_min 0 (Navi 21, RDNA4, Polaris, Vega): from the default, whole watts up
        (290, 261, 290, 261),  # RDNA3 retail: cap_min is ~90 % of the default
        (304, 0, 120, 120),  # a user already set 120 W on a 304 W board: never above what was found
        (95, 95, 95, 95),  # laptop: min = max = default
    ],
)
def test_floor(default_w: float, cap_min_w: float, original_w: float, floor_w: float) -> None:
    assert floor_cap_w(0.6, default_w, cap_min_w, original_w) == floor_w


def test_an_idle_state_holds_the_filter_and_the_clock_alone() -> None:
    """governor._idle keeps an idle state as it is: it must hold nothing but the filtered headroom and the clock,
    whatever the law went through (engaged, released, idle restore, no temperature)."""
    loop = Loop()
    states = [loop.tick(0, 30.0, can_rise=True).state, loop.tick(1, None).state]
    states += [d.state for d in (loop.run(2, 120, 0.0), loop.run(121, 200, 15.0, power_w=25.0))]
    states += [loop.tick(t, 15.0, power_w=25.0).state for t in range(201, 201 + int(P.idle_restore_after_s) + 5)]
    states += [loop.tick(t, 4.0).state for t in range(1000, 1400)] + [loop.tick(1400, None).state]
    idle = [s for s in states if s.phase == "idle"]
    assert len(idle) > 50 and any(s.phase == "governing" for s in states)
    for state in idle:
        assert state == GovernorState(headroom_filtered_c=state.headroom_filtered_c, last_now=state.last_now)
