"""What the stop-word rule (``overlap.says_stop``: a negation or a request to stop is always an
interruption) costs and gains on the dev set only.

    python -m bench.fit.stop_words      # reuses bench.fit.overlap_fit's glances (~3 min the first time)

The rule was not fitted (the issue's words and their plain kin). This prints, over the dev clips
(every ``DEV_BACKCHANNELS`` and ``DEV_INTERRUPTIONS`` phrase in every dev voice, glanced at as the
judge does): the backchannels the shipped judge takes as interruptions with and without the rule
(and which glances said a stop word), the interruptions it misses, and the voice heard at the
verdict (p50) for interruptions.
"""

from __future__ import annotations

import numpy as np

from bench.fit.overlap_fit import STEPS_MS, glances, judge
from core.conversation import overlap as ov

SHIPPED = dict(first=ov.GLANCE_FIRST_MS, confirm=ov.CONFIRM, letters=ov.MIN_LETTERS, longest=ov.LONGEST_BACKCHANNEL_MS)


def _look(r: dict, ms: int) -> str:
    return r["looks"][str(ms)] if str(ms) in r["looks"] else r["looks"][ms]


def judge_with_stop(r: dict) -> tuple[str, int]:
    """The shipped judge with the rule: the first glance (from the first glance on) or the whole
    clip that says a stop word settles an interruption."""
    verdict, at = judge(r, ov.BACKCHANNEL_WORDS, **SHIPPED)
    stop = next((ms for ms in STEPS_MS if SHIPPED["first"] <= ms < min(r["ms"], SHIPPED["longest"])
                 and ov.says_stop(_look(r, ms))), None)
    if stop is not None:
        return "interruption", min(stop, at) if verdict == "interruption" else stop
    if verdict != "interruption" and ov.says_stop(r["whole"]):
        return "interruption", r["ms"]
    return verdict, at


def main() -> None:
    rows = glances()
    bcs = [r for r in rows if r["kind"] == "backchannel"]
    ints = [r for r in rows if r["kind"] == "interruption"]
    for name, rule in (("without the rule", lambda r: judge(r, ov.BACKCHANNEL_WORDS, **SHIPPED)),
                       ("with the rule", judge_with_stop)):
        bc = [rule(r)[0] for r in bcs]
        it = [rule(r) for r in ints]
        false = sum(v == "interruption" for v in bc)
        missed = sum(v != "interruption" for v, _ in it)
        p50 = float(np.median([ms for v, ms in it if v == "interruption"]))
        print(f"{name:17s}: backchannels taken as interruptions {false}/{len(bc)} ({false / len(bc):.0%}); "
              f"interruptions missed {missed}/{len(it)}; voice at the verdict p50 {p50:.0f} ms")
    print("\ndev backchannel clips in which a glance or the whole clip said a stop word:")
    for r in bcs:
        said = [t for t in [*r["looks"].values(), r["whole"]] if ov.says_stop(t)]
        if said:
            print(f"  {r['text']!r} ({r['voice']}): {said}")


if __name__ == "__main__":
    main()
