"""Reproducers of the twenty-sixth hostile pass: unsafe AMP501 fixes that changed a program.

A module-level fill read by another file through `runpy.run_path`, `importlib.import_module` or
`exec(open(...).read())`, and a fill read through `eval(...)` of a string: each wrote finfo.min
where -1e9 had been read (-2e9 became -inf). Now no fix.
"""

CASES: dict[str, dict[str, str]] = {'AMP501-eval_string_read': {'train.py': 'import torch\n'
                                         'import torch.nn.functional as F\n'
                                         'use_fp16 = False\n'
                                         '\n'
                                         'q = torch.randn(2, 3, 4, '
                                         'generator=torch.Generator().manual_seed(0))\n'
                                         'scores = torch.matmul(q, q.transpose(-1, -2))\n'
                                         'mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])\n'
                                         'scores = scores.masked_fill(mask == 0, -1e9)\n'
                                         'attn = F.softmax(scores, dim=-1)\n'
                                         'print("scaled", eval("(scores * 2).min().item()"))\n'},
 'AMP501-exec_file_read': {'masks.py': 'import torch\n'
                                       'import torch.nn.functional as F\n'
                                       'use_fp16 = False\n'
                                       '\n'
                                       'q = torch.randn(2, 3, 4, '
                                       'generator=torch.Generator().manual_seed(0))\n'
                                       'scores = torch.matmul(q, q.transpose(-1, -2))\n'
                                       'mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])\n'
                                       'scores = scores.masked_fill(mask == 0, -1e9)\n'
                                       'attn = F.softmax(scores, dim=-1)\n',
                           'train.py': 'import os\n'
                                       'ns = {}\n'
                                       'exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), '
                                       '"masks.py")).read(), ns)\n'
                                       'print("scaled", (ns["scores"] * 2).min().item())\n'},
 'AMP501-func_eval_read': {'train.py': 'import torch\n'
                                       'import torch.nn.functional as F\n'
                                       'use_fp16 = False\n'
                                       '\n'
                                       'proj = torch.nn.Linear(4, 4)\n'
                                       'def attend(q, mask, probe):\n'
                                       '    h = proj(q)\n'
                                       '    scores = torch.matmul(h, h.transpose(-1, -2))\n'
                                       '    scores = scores.masked_fill(mask == 0, -1e9)\n'
                                       '    attn = F.softmax(scores, dim=-1)\n'
                                       '    print("probe", eval(probe))\n'
                                       '    return attn\n'
                                       'q = torch.randn(2, 3, 4, '
                                       'generator=torch.Generator().manual_seed(0))\n'
                                       'mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])\n'
                                       'with torch.no_grad():\n'
                                       '    attend(q, mask, "(scores * 2).min().item()")\n'},
 'AMP501-importlib_module_fill': {'masks.py': 'import torch\n'
                                              'import torch.nn.functional as F\n'
                                              'use_fp16 = False\n'
                                              '\n'
                                              'q = torch.randn(2, 3, 4, '
                                              'generator=torch.Generator().manual_seed(0))\n'
                                              'scores = torch.matmul(q, q.transpose(-1, -2))\n'
                                              'mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])\n'
                                              'scores = scores.masked_fill(mask == 0, -1e9)\n'
                                              'attn = F.softmax(scores, dim=-1)\n',
                                  'train.py': 'import importlib\n'
                                              'm = importlib.import_module("masks")\n'
                                              'print("scaled", (m.scores * 2).min().item())\n'},
 'AMP501-runpy_module_fill': {'masks.py': 'import torch\n'
                                          'import torch.nn.functional as F\n'
                                          'use_fp16 = False\n'
                                          '\n'
                                          'q = torch.randn(2, 3, 4, '
                                          'generator=torch.Generator().manual_seed(0))\n'
                                          'scores = torch.matmul(q, q.transpose(-1, -2))\n'
                                          'mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])\n'
                                          'scores = scores.masked_fill(mask == 0, -1e9)\n'
                                          'attn = F.softmax(scores, dim=-1)\n',
                              'train.py': 'import runpy, os\n'
                                          'g = runpy.run_path(os.path.join(os.path.dirname(__file__), '
                                          '"masks.py"))\n'
                                          'print("scaled", (g["scores"] * 2).min().item())\n'}}
