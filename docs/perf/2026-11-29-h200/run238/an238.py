import re, glob, collections, sys
R = sys.argv[1]
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob(f"{R}/*_[12].log")):
    name = f.split('/')[-1][:-4]
    b, rest = name.split('_', 1)
    kind, rnd = rest.rsplit('_', 1)
    txt = open(f, errors='replace').read()
    for m in re.finditer(r"^(\S+): ours median ([\d.]+) µs", txt, re.M):
        rows[m.group(1)][b].append(float(m.group(2)))
    for m in re.finditer(r"B(\d+) H(\d+) S(\d+) D(\d+) (\S+): fwd ([\d.]+) µs .*?window ([\d.]+)× softcap ([\d.]+)× alibi ([\d.]+)× plain \| bwd ([\d.]+)", txt):
        key = f"train D{m.group(4)} {m.group(5)}"
        rows[key + " fwd"][b].append(float(m.group(6)))
        rows[key + " softcap×"][b].append(float(m.group(8)))
        rows[key + " alibi×"][b].append(float(m.group(9)))
        rows[key + " window×"][b].append(float(m.group(7)))
for k, d in rows.items():
    o = d.get('O', [])
    line = f"{k:45s} " + "  ".join(f"{b}: " + "/".join(f"{x:.3f}" if x < 10 else f"{x:.1f}" for x in d.get(b, [])) for b in ['O', 'V5', 'V3'])
    if o:
        mo = sum(o) / len(o)
        line += "   " + " ".join(f"{b}/O {sum(d[b])/len(d[b])/mo:.3f}" for b in ['V5', 'V3'] if d.get(b))
    print(line)
