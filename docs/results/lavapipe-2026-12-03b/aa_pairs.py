import json, sys
def load(p):
    out = {}
    for t in json.load(open(p))['pytest_dispatch']['tests']:
        for m in t['measurements']:
            i = m.get('instructions')
            if i: out[(t['nodeid'].split('::')[-1], m['name'])] = i['per_call']
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
diffs = sorted(((b[k]/a[k]-1)*100, k) for k in a if k in b)
print(f"{sys.argv[1]} vs {sys.argv[2]}: {len(diffs)} measurements, |diff| max {max(abs(d) for d,_ in diffs):.3f}%, >0.1%: {sum(abs(d)>0.1 for d,_ in diffs)}, >0.5%: {sum(abs(d)>0.5 for d,_ in diffs)}")
for d,k in diffs:
    if abs(d) > 0.1: print(f"   {d:+.3f}% {k}")
