#!/usr/bin/env python3
"""What-if for the FlashOverlap predictor: a per-call setup X (us) taken out of every point of a transport's
transfer curve and charged once before the first wave — what `bench gemm-rs --measure` does since 7818562 for
the peer copy-engine transport (its standalone calls each reset flags and pass a start barrier, which run()
pays once). Replays `predict_contended_us` (src/overlap/search.cpp, same recurrence, interpolation and
contention term) on the partitions the rows ran, so the error is the model's alone, no GPU.

Usage: overlap_setup_whatif.py INPUTS.txt ROWS.jsonl [--key pce] [--setups 0,10,20,30] [--beside-gemm]
  --beside-gemm: also predict the same partitions with the setup run beside the GEMM (the chain's earliest
  start, SearchInputs::comm_start_us) instead of before it — a model estimate of moving the start barrier
  INPUTS.txt: the transport's `--measure` inputs (e.g. gemm-rs-search-inputs-peer-copy-engine-*.txt)
  ROWS.jsonl: the bench rows (decision_<key>, groups_<key>, flashoverlap_<key>_us)
"""
import json, math, statistics, sys
def curve_lat(bs, us, b):
    if b <= bs[0]: return us[0]
    if len(bs) == 1: return us[0]*(b/bs[0])
    i = 1
    while i+1 < len(bs) and bs[i] < b: i += 1
    x0,x1,y0,y1 = bs[i-1],bs[i],us[i-1],us[i]
    return max(y0+(y1-y0)*(b-x0)/(x1-x0), us[0])
def load(path):
    d={}
    for line in open(path):
        if not line.strip() or line.startswith('#'): continue
        p=line.split()
        x=dict(m=int(p[2]),n=int(p[3]),k=int(p[4]),waves=int(p[7]),wave_us=float(p[8]),fwe=float(p[9]),bpw=float(p[10]),lwf=float(p[11]),ovh=float(p[12]),
               cb=[float(v) for v in p[13].split(',')],cu=[float(v) for v in p[14].split(',')],rho=float(p[15]),seq=float(p[16]))
        if len(p)>18: x['tb']=[float(v) for v in p[17].split(',')]; x['tu']=[float(v) for v in p[18].split(',')]
        d[(x['m'],x['n'],x['k'])]=x
    return d
def gb(x,w0,w1):
    w=w1-w0
    if w1==x['waves']: w-=(1-x['lwf'])
    return w*x['bpw']
def gc(x,w0,w1,fwe):
    t=(w1-w0)*x['wave_us']
    if w0==0: t+=fwe
    return t
def predict(x,parts,X,comm_start=False):
    # comm_start: the setup delays the communication chain's start (run() meets beside the GEMM, 7818562+)
    # instead of the first wave (run() meets before the GEMM).
    cu=[max(1.0,u-X) for u in x['cu']]; fwe=x['fwe']+(0 if comm_start else X)
    tail='tb' in x
    tp=tt=0; tm=X if comm_start else 0; w=0
    for g in parts:
        tp+=gc(x,w,w+g,fwe)
        tm=max(tp,tm)+curve_lat(x['cb'],cu,gb(x,w,w+g))+x['ovh']
        if tail: tt=max(tt,tm)+curve_lat(x['tb'],x['tu'],gb(x,w,w+g))
        w+=g
    p0=tt if tail else tm
    if x['rho']<=0: return p0
    serial=gc(x,0,x['waves'],fwe); w=0
    for g in parts:
        b=gb(x,w,w+g); serial+=curve_lat(x['cb'],cu,b)+x['ovh']+(curve_lat(x['tb'],x['tu'],b) if tail else 0); w+=g
    return p0+x['rho']*(serial-p0)

def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    key = argv[argv.index("--key") + 1] if "--key" in argv else "pce"
    setups = [float(v) for v in argv[argv.index("--setups") + 1].split(",")] if "--setups" in argv else [0, 10, 20, 30]
    beside = "--beside-gemm" in argv  # also: the same setup as the chain's start, its prediction of the same partitions
    inp = load(argv[1])
    rows = [json.loads(l) for l in open(argv[2]) if l.strip()]
    for X in setups:
        errs, gain = [], []
        for r in rows:
            if r.get("decision_" + key) != "overlap" or not r.get("correct", False):
                continue
            x = inp.get((r["m"], r["n"], r["k"]))
            parts = [int(v) for v in r["groups_" + key].split(",")]
            if x is None or sum(parts) != x["waves"]:
                continue
            p = predict(x, parts, X)
            m = r["flashoverlap_" + key + "_us"]
            errs.append((m - p) / m)
            if beside:
                gain.append(p / predict(x, parts, X, comm_start=True))
        if not errs:
            print("no overlapped rows with inputs")
            return 1
        print(f"setup {X:g} us: {len(errs)} overlapped rows, median |error| {100 * statistics.median(abs(e) for e in errs):.1f}%, "
              f"mean signed {100 * statistics.mean(errs):+.1f}% (> 0: measured slower than predicted)")
        if beside:
            g = math.exp(sum(math.log(v) for v in gain) / len(gain))
            print(f"    the setup beside the GEMM instead (the chain's start): predicted {g:.3f}x faster (geomean), "
                  f"up to {max(gain):.3f}x, same partitions")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
