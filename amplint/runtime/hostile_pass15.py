"""Reproducers of the fifteenth hostile pass: fixes that still changed a program.

AMP101 (1): `if clip_value: clip_grad_value_(...)` then `if clip_norm: clip_grad_norm_(...)`
got an `unscale_` before each clip; with both options on the second raised. Now a fix only at
the clip every other clip of the same backward passes through first (none here). AMP401 (1): a
legacy name split over lines by a backslash was rewritten on one line, moving every later line
number (`%(lineno)d` in logs); now no fix where the new spelling spans fewer lines.
"""

CASES: dict[str, dict[str, str]] = {'AMP101-clip_value_then_norm': {'train.py': '\n'
                                             'import torch\n'
                                             'torch.manual_seed(0)\n'
                                             '\n'
                                             'model = torch.nn.Linear(4, 1)\n'
                                             'opt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
                                             'scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)\n'
                                             'x, y = torch.randn(8, 4), torch.randn(8, 1)\n'
                                             '# as in public trainers: `if args.clip_value > 0: '
                                             'clip_grad_value_(...)` then `if args.clip_norm > 0: '
                                             'clip_grad_norm_(...)`\n'
                                             'clip_value, clip_norm = 0.5, 1.0\n'
                                             'for it in range(3):\n'
                                             '    opt.zero_grad()\n'
                                             '    with torch.autocast("cpu", dtype=torch.bfloat16):\n'
                                             '        loss = torch.nn.functional.mse_loss(model(x).float(), '
                                             'y)\n'
                                             '    scaler.scale(loss).backward()\n'
                                             '    if clip_value:\n'
                                             '        torch.nn.utils.clip_grad_value_(model.parameters(), '
                                             'clip_value)\n'
                                             '    if clip_norm:\n'
                                             '        torch.nn.utils.clip_grad_norm_(model.parameters(), '
                                             'clip_norm)\n'
                                             '    scaler.step(opt)\n'
                                             '    scaler.update()\n'
                                             '    print(it, round(loss.item(), 5))\n'},
 'AMP401-callee_backslash_lineno': {'train.py': 'import torch, logging, sys\n'
                                                'logging.basicConfig(format="%(filename)s:%(lineno)d '
                                                '%(message)s", level=logging.INFO, force=True, '
                                                'stream=sys.stdout)\n'
                                                'm, x = torch.nn.Linear(4, 4), torch.randn(2, 4)\n'
                                                'with torch.cpu.amp \\\n'
                                                '        .autocast(dtype=torch.bfloat16):\n'
                                                '    y = m(x)\n'
                                                'logging.info("dtype %s", y.dtype)\n'}}
