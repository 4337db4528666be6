import sys, collections, statistics as st
rows = collections.defaultdict(dict)  # (tag, cta) -> {(warp,i): ev}
kinds = {}
for line in open(sys.argv[1], errors='replace'):
    if not line.startswith('TL '): continue
    f = line.split()
    if len(f) != 14: continue
    tag, kind, cta, w, i = map(int, f[1:6]); ev = list(map(int, f[6:14]))
    rows[(tag, cta)][(w, i)] = ev; kinds[(tag, w)] = kind
def d(a, b): return (b - a) & 0xffffffff
for (tag, cta), r in sorted(rows.items()):
    print(f"== tag {tag} (BN {tag//1000}, fp8 {tag//100%10}, pp {tag//10%10}, feat {tag%10}) cta {cta}")
    cons = sorted({w for (w, i) in r if kinds[(tag, w)] == 2})
    names = ['barrier', 'K wait', 'V wait', 'issue+QK', 'softmax', 'PV wait', 'rescale+cvt']
    for w in cons[:1] + cons[4:5]:
        its = sorted(i for (ww, i) in r if ww == w)
        its = its[2:-2] if len(its) > 6 else its
        ph = [[d(r[(w, i)][k], r[(w, i)][k + 1]) for i in its] for k in range(7)]
        cyc = [d(r[(w, i)][0], r[(w, i + 1)][0]) for i in its if (w, i + 1) in r]
        print(f"  warp {w}: tiles {len(its)}  cycle/tile median {st.median(cyc) if cyc else 0:.0f}  " +
              "  ".join(f"{n} {st.median(p):.0f}" for n, p in zip(names, ph)))
    if len(cons) >= 5:
        a, b = cons[0], cons[4]
        its = sorted(i for (ww, i) in r if ww == a and (b, i) in r)
        # offset of WG2's tile start vs WG1's, and softmax overlap
        offs = [((r[(b, i)][0] - r[(a, i)][0] + 2**31) % 2**32) - 2**31 for i in its]
        ov = []
        for i in its:
            s1, e1 = r[(a, i)][4], r[(a, i)][5]; s2, e2 = r[(b, i)][4], r[(b, i)][5]
            ov.append(max(0, min(e1, e2) - max(s1, s2)) / max(1, e1 - s1))
        print(f"  WG2-WG1 start offset median {st.median(offs):.0f}; softmax overlap fraction median {st.median(ov):.2f}")
    for w in sorted({w for (w, i) in r if kinds[(tag, w)] in (0, 1)}):
        its = sorted(i for (ww, i) in r if ww == w)[2:-2]
        if not its: continue
        k = kinds[(tag, w)]
        if k == 0:
            wk = [d(r[(w, i)][0], r[(w, i)][1]) for i in its]; wv = [d(r[(w, i)][1], r[(w, i)][2]) for i in its]
            print(f"  producer warp {w}: wait free K {st.median(wk):.0f}, then free V/raw {st.median(wv):.0f}")
        else:
            a1 = [d(r[(w, i)][0], r[(w, i)][1]) for i in its]; a2 = [d(r[(w, i)][1], r[(w, i)][2]) for i in its]; a3 = [d(r[(w, i)][2], r[(w, i)][3]) for i in its]
            print(f"  transposer warp {w}: wait raw V {st.median(a1):.0f}, wait free Vt {st.median(a2):.0f}, transpose {st.median(a3):.0f}")
