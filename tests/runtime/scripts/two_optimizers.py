"""A GAN-shaped loop: the discriminator steps twice per iteration, the generator once.

`--steps N` counts per optimizer: the run stops when the discriminator is about to take its
step N+1, i.e. during iteration (N+1)//2, with the generator's steps fewer.  Prints each step.
"""
import torch

torch.manual_seed(0)
gen, disc = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
opt_g = torch.optim.SGD(gen.parameters(), lr=0.01)
opt_d = torch.optim.SGD(disc.parameters(), lr=0.01)
for it in range(10):
    for _ in range(2):
        disc(gen(torch.randn(8, 4)).detach()).mean().backward()
        opt_d.step()
        opt_d.zero_grad()
        print(f"iteration {it}: discriminator step", flush=True)
    (-disc(gen(torch.randn(8, 4))).mean()).backward()
    opt_g.step()
    opt_g.zero_grad()
    print(f"iteration {it}: generator step", flush=True)
