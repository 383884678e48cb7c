"""Replays kept A/B job outcomes (ab_jobs.py --keep) through paired.judge_sessions and
paired.futility as Job._look takes them (Benjamini-Hochberg left out), for the code checked out.

    python replay_weighted.py 'DIR/*.json'
"""
import json, glob, math, sys, collections
sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parents[3]))
from pytest_dispatch.judgement import paired
from pytest_dispatch.judgement.status import Status
from pytest_dispatch.ab.coordinator import FUTILITY_FROM
design, question = paired.SessionDesign(pairs=10, min_time=0.5), paired.ChangeQuestion(0.02)
def pv(s):
    r = s['ratio'] if s['ratio'] is not None else math.nan
    return paired.PairedVerdict(Status.INCONCLUSIVE, r, s['low'] or 0.0, s['high'] if s['high'] is not None else math.inf, 0.98, s['pairs'], 0.1, 10.0, 10.0, 1.0)
def run(verdicts):
    for n in range(1, len(verdicts) + 1):
        last = n >= design.max_sessions
        if last or n in design.look_points:
            v = paired.judge_sessions(verdicts[:n], question, design)
            if v.status != Status.INCONCLUSIVE or last:
                return str(v.status), n, v.ratio
            if paired.futility(verdicts[:n], question, design): return 'futile', n, v.ratio
        elif n >= FUTILITY_FROM and paired.futility(verdicts[:n], question, design):
            return 'futile', n, paired.judge_sessions(verdicts[:n], question, design).ratio
    return 'ran out of kept sessions', len(verdicts), None
c = collections.Counter()
for f in sorted(glob.glob(sys.argv[1])):
    d = json.load(open(f))
    for m in d['measurements']:
        vs = [pv(s) for s in m.get('sessions') or []]
        out = run(vs)
        kind = 'slow' if 'slow' in m['key'] else 'same'
        c[(kind, m['status'], out[0])] += 1
        if kind == 'slow': print(f.split('/')[-1], m['status'], len(vs), out)
for k, v in sorted(c.items()): print(k, v)
