"""Turn protocols/opprof-phase3.yaml into a stand-in campaign for demonstrations.

Same plan shape (the co-location check with its eight-way and four-way
regimes, five burn-ins, the 24-cell matrix of saturation and moderate runs,
four confirmations, classes, budget, the seeded order), but the stand-in
server (bin/standin) driven by Warden's load client (bin/loadgen) on small
synthetic manifests, eight fake GPUs and durations compressed to seconds.
It is what docs/screenshots/report-phase3-standin*.png are made from (`make
screenshots`; the gate-error one with --gate-error: the co-location gate's
figure_tolerance 0, with no F3 validator to give the figures it compares):

    python3 scripts/phase3_standin.py [--gate-error] OUT.yaml MANIFEST_DIR   # from the repository root
    bin/controller start -f OUT.yaml -d /tmp/p3 --gpu-backend fake --foreground
    bin/ctlq report -d /tmp/p3

The five server configurations differ as the stand-in can make them
differ, for the report to have something to compare: C10 and C11 (the
protocol's --max-num-seqs 64) let two requests generate at once
(--max-running 2), C01 and C11 (--max-num-batched-tokens 2048) generate a
token in 6 ms instead of 4, C00-TP2 in 3. That is an illustration, not a
model of vLLM: never a benchmark, the figures are the stand-in's.

The slots' CPU masks are two CPUs each where the host has 16 or more,
else one each: a host of fewer than 8 CPUs cannot hold the eight disjoint
slots, and the script says so.
It needs PyYAML, and bin/loadgen to write the manifests.
"""
import os
import subprocess
import sys

import yaml

args = [a for a in sys.argv[1:] if not a.startswith('--')]
gate_error = '--gate-error' in sys.argv[1:]
if len(args) != 2:
    sys.exit('usage: phase3_standin.py [--gate-error] OUT.yaml MANIFEST_DIR')
out, manifests = args[0], os.path.abspath(args[1])

p = yaml.safe_load(open('protocols/opprof-phase3.yaml'))
ncpu = os.cpu_count() or 1
p.update(name='opprof-phase3-standin',
         title='OpProf Phase 3 on stand-ins, durations compressed (demonstration only)',
         workdir=os.getcwd(),
         host={'gpus': 8, 'cpus': max(ncpu, 1), 'numa_nodes': 2},
         ledger=[['true']],
         cleanup={'timeout_s': 20},
         idle_settle_s=0.5,  # the protocol's 10 s idle-power settle, compressed like the rest
         stop={'quarantined_fraction_gt': 0.2, 'failed_fraction_gt': 0.05})
p['vars'].update(S='bin/standin', CLIENT='bin/loadgen', PRIVATE=manifests)
for k in ('validators', 'power_check'):
    p.pop(k, None)

# one small manifest per pattern, as loadgen materializes them: long or
# short output from the pattern's note, its arrival class
os.makedirs(manifests, exist_ok=True)
p['provenance'] = [{'path': 'bin/loadgen', 'role': 'client'}]
for x in next(a for a in p['axes'] if a['name'] == 'pattern')['values']:
    path = os.path.join(manifests, x['id'] + '.jsonl')
    note = x.get('note', '')
    if not os.path.exists(path):
        subprocess.run(['bin/loadgen', 'materialize', '--id', x['id'], '--input-uniform', '8:32',
                        '--output-fixed', '16' if 'long output' in note else '8',
                        '--arrival', 'burst:8' if 'burst' in note else 'steady',
                        '--num-requests', '20000', '--workload-seed', '20260712', '--out', path],
                       check=True, stdout=subprocess.DEVNULL)
    p['provenance'].append({'path': path, 'role': 'manifest'})

if ncpu < len(p['slots']):
    sys.exit('phase3_standin.py: the %d slots need disjoint CPU masks, one CPU each at least; this host has %d CPUs' % (len(p['slots']), ncpu))
for i, s in enumerate(p['slots']):
    s['cpus'] = '%d-%d' % (2 * i, 2 * i + 1) if ncpu >= 2 * len(p['slots']) else str(i)
    s['port'] = 'auto'
for c in p['classes']:
    c.update(drain_allowance_s=5, watchdog_s=15)
v = p['servers'][0]
for k in ('health', 'env'):
    v.pop(k, None)
v.update(kind='standin',
         command=['${S}', 'server', '--port', '${PORT}', '--load-s', '0.3', '--shutdown-timeout', '2',
                  '--gpu-mem-mib', '40000',
                  '--effective-config', 'effective config: enable_chunked_prefill=True'],
         ready_timeout_s=20, shutdown_grace_s=5, group_grace_s=2,
         expect=[{'name': 'c', 'pattern': 'enable_chunked_prefill=True'}])

# loadgen on the seed's timeline, compressed: a 0.3 s warm-up and three
# 0.5 s clean segments, no profile windows. A background load runs three
# segments of 20 s, longer than both of its block's targets take (each
# with its settle, load, warm-up, clean segments and cleanup: about 5 s on
# a 16-CPU host); the controller ends it once its targets are done, and
# one that ended before them fails the co-location check (A-P3-1).
timeline = {'saturation': ['--load-point', 'saturation', '--request-rate', 'inf'],
            'moderate': ['--load-point', 'moderate', '--saturation-result', '${NEED_SATURATION_DIR}/client/result.json', '--rate-fraction', '0.60'],
            'confirm': ['--load-point', 'moderate', '--saturation-result', '${NEED_SATURATION_DIR}/client/result.json', '--rate-fraction', '0.60'],
            'burnin': ['--load-point', 'saturation', '--request-rate', 'inf'],
            'background': ['--load-point', 'saturation', '--request-rate', 'inf']}
for l in p['loads']:
    l.pop('env', None)
    segs = {'burnin': ['--warmup-seconds', '0.5', '--num-clean-segments', '0'],
            'background': ['--warmup-seconds', '0.3', '--clean-segment-seconds', '20', '--num-clean-segments', '3']}.get(
        l['name'], ['--warmup-seconds', '0.3', '--clean-segment-seconds', '0.5', '--num-clean-segments', '3'])
    l['client'] = (['${CLIENT}', 'run', '--manifest', '${MANIFEST}', '--base-url', 'http://127.0.0.1:${PORT}', '--model', 'standin']
                   + timeline[l['name']] + ['--max-concurrency', '4', '--ignore-eos', '--temperature', '0'] + segs
                   + ['--drain-timeout-seconds', '${DRAIN_WATCHDOG_S}', '--workload-seed', '${WORKLOAD_SEED}',
                      '--result-dir', '${ATTEMPT_DIR}/client'])

effects = {'C00': ['--token-ms', '4'], 'C10': ['--max-running', '2', '--token-ms', '4'], 'C01': ['--token-ms', '6'],
           'C11': ['--max-running', '2', '--token-ms', '6'], 'C00-TP2': ['--token-ms', '3']}
for a in p['axes']:
    for x in a['values']:
        x.pop('prepare', None)
        if a['name'] == 'config':
            x['expect'] = []
            x['server_args'] = x.get('server_args', []) + effects[x['id']]
for h in p['phases']:
    h.pop('prior', None)  # the co-location check runs here (the protocol's E-a ran it before)
    g = h.get('colocation', {}).get('gate')
    if g:
        g.update(throughput_tolerance=0.5, figure_tolerance=0 if gate_error else 0.5)
        g.pop('validator', None)
        g.pop('profile_windows', None)  # the stand-in's timeline has no profile windows to count
yaml.safe_dump(p, open(out, 'w'), sort_keys=False)
