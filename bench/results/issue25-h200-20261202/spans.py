import sys,statistics,collections
ev=[]
for line in open(sys.argv[1]):
    if line.startswith('SPAN '):
        _,n,t=line.split(); ev.append((n,int(t)))
d=collections.OrderedDict()
for (a,t0),(b,t1) in zip(ev,ev[1:]):
    d.setdefault(f"{a} > {b}",[]).append((t1-t0)/1e6)
tot=0
for k,v in d.items():
    m=statistics.median(v); 
    if len(v)>2: tot+=m
    print(f"{k:40s} {m:7.3f} ms  n={len(v)}")
print("sum of medians (n>2):", round(tot,2))
