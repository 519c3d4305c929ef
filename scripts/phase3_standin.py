"""Turn protocols/opprof-phase3.yaml into a stand-in campaign for demonstrations.

Same plan shape (73 runs: the co-location check with its eight-way and
four-way regimes, burn-ins, the 24-cell matrix, confirmations, classes,
budget), but the stand-in server and client (bin/standin), eight fake GPUs
on 16 CPUs (two per slot) and durations compressed to seconds. It is what
docs/screenshots/report-phase3-standin*.png were made from (the gate-error
one with figure_tolerance left at 0):

    python3 scripts/phase3_standin.py        # from the repository root; writes /tmp/p3s.yaml
    bin/controller start -f /tmp/p3s.yaml -d /tmp/p3 --gpu-backend fake --foreground
    bin/ctlq report -d /tmp/p3

It needs a host with at least 16 CPUs (each slot's CPU mask must hold an
online CPU) and PyYAML. Never a benchmark: the figures are the stand-ins'.
"""
import os

import yaml

p = yaml.safe_load(open('protocols/opprof-phase3.yaml'))
p.update(name='opprof-phase3-standin',
         title='OpProf Phase 3 on stand-ins, durations compressed (demonstration only)',
         workdir=os.getcwd(),
         host={'gpus': 8, 'cpus': 16, 'numa_nodes': 2},
         vars={'S': 'bin/standin', 'PRIVATE': 'x'},
         ledger=[['true']],
         cleanup={'timeout_s': 20},
         stop={'quarantined_fraction_gt': 0.2, 'failed_fraction_gt': 0.05})
for k in ('provenance', 'validators'):
    p.pop(k, None)
for i, s in enumerate(p['slots']):
    s['cpus'] = '%d-%d' % (2 * i, 2 * i + 1)
    s['port'] = 18600 + i
for c in p['classes']:
    c.update(drain_allowance_s=5, watchdog_s=15)
v = p['servers'][0]
for k in ('health', 'env'):
    v.pop(k, None)
v.update(kind='standin',
         command=['${S}', 'server', '--port', '${PORT}', '--load-s', '0.3', '--shutdown-timeout', '2',
                  '--gpu-mem-mib', '40000', '--token-ms', '1',
                  '--effective-config', 'effective config: enable_chunked_prefill=True'],
         ready_timeout_s=20, shutdown_grace_s=5, group_grace_s=2,
         expect=[{'name': 'c', 'pattern': 'enable_chunked_prefill=True'}])
for l in p['loads']:
    l.pop('env', None)
    l['client'] = ['${S}', 'client', '--warmup-s', '0.3',
                   '--measure-s', '12' if l['name'] == 'background' else '1.5',
                   '--drain-s', '2', '--concurrency', '4', '--max-tokens', '16',
                   '--result-dir', '${ATTEMPT_DIR}/client']
for a in p['axes']:
    for x in a['values']:
        x.pop('prepare', None)
        if a['name'] == 'config':
            x['expect'] = []
            x.pop('server_args', None)
for h in p['phases']:
    g = h.get('colocation', {}).get('gate')
    if g:
        g.update(throughput_field='throughput_rps', throughput_tolerance=0.5, figure_tolerance=0.5)
        g.pop('validator', None)
yaml.safe_dump(p, open('/tmp/p3s.yaml', 'w'), sort_keys=False)
