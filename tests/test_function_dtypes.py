"""How a custom autograd Function reconciles its dtypes by hand (amplint/analysis/function_dtypes.py):
the two shapes AMP205 accepts in place of custom_fwd/custom_bwd, and their near misses."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from amplint.analysis.function_dtypes import computes_in_gradient_dtype, upcasts_by_hand
from amplint.analysis.model import ModuleModel

HEADER = "import torch\nimport torch.nn.functional as F\n\n"


def passes(forward_body: str, backward_body: str, helpers: str = ""):
    src = HEADER + textwrap.dedent(helpers) + textwrap.dedent(f"""
class Fn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
{textwrap.indent(textwrap.dedent(forward_body), " " * 8)}
    @staticmethod
    def backward(ctx, grad):
{textwrap.indent(textwrap.dedent(backward_body), " " * 8)}
""")
    model = ModuleModel.build(cst.parse_module(src))
    cls = model.classes["Fn"]
    return cls.methods["forward"], cls.methods["backward"], model


SAVED = "x, weight = ctx.saved_tensors\n"


@pytest.mark.parametrize(
    "backward, aligned",
    [
        # every matmul meets the gradient's dtype
        (SAVED + "return grad @ weight.to(grad.dtype), grad.t() @ x.to(grad.dtype)", True),
        (SAVED + "d = grad.dtype\ng2 = grad.reshape(-1, 4).to(d)\nreturn g2 @ weight.to(d), g2.t() @ x.to(d)", True),
        (SAVED + "return torch.matmul(grad, weight.type_as(grad)), None", True),
        (SAVED + "x, weight = (x.to(grad.dtype), weight.to(grad.dtype))\nreturn torch.einsum('ij,jk->ik', grad, weight), None", True),
        (SAVED + "w = dequantize(weight, ctx.scale, grad.dtype)\nreturn grad @ w, None", True),  # a helper handed the dtype
        (SAVED + "w = weight.to(grad.dtype)\nreturn grad.mm(w), None", True),  # a tensor method
        # near misses: one operand in another dtype
        (SAVED + "return grad @ weight, None", False),  # the saved weight as it is
        (SAVED + "return grad.to(weight.dtype) @ weight, None", False),  # the weight's dtype, not the gradient's
        (SAVED + "return grad @ weight.to(grad.dtype), grad.t() @ x", False),  # only half of it
        (SAVED + "w = weight.to(grad.dtype)\nw = weight\nreturn grad @ w, None", False),  # reassigned before use
        (SAVED + "return grad @ weight.float().to(grad.dtype).float(), None", False),  # cast back up last
        (SAVED + "return grad * weight, None", False),  # no matmul: nothing to reconcile here
    ],
)
def test_a_backward_that_computes_in_the_gradients_dtype(backward: str, aligned: bool) -> None:
    _, bwd, model = passes("ctx.save_for_backward(x, weight)\nreturn F.linear(x, weight)", backward)
    assert computes_in_gradient_dtype(bwd, model) is aligned


@pytest.mark.parametrize(
    "forward, backward, by_hand",
    [
        # no op autocast casts down; the backward upcasts its tensors itself
        ("return torch.logsumexp(x.float(), -1)", "(x,) = ctx.saved_tensors\nreturn torch.exp(x.float()) * grad.float(), None", True),
        ("return stats(x)", "(x,) = ctx.saved_tensors\nreturn log_softmax(x) * grad, None", True),  # through helpers
        ("return torch.exp(x)", "(x,) = ctx.saved_tensors\nreturn grad * torch.exp(x.to(torch.float32)), None", True),
        # near misses
        ("return torch.exp(x)", "(x,) = ctx.saved_tensors\nreturn grad * torch.exp(x), None", False),  # no upcast
        ("return x.float() @ weight.float()", "return grad.float() @ weight.float(), None", False),  # a matmul: autocast casts it down
        ("return matmul_helper(x, weight)", "(x,) = ctx.saved_tensors\nreturn torch.exp(x.float()) * grad, None", False),  # in a helper
        # a backward with no op of autocast's lists: custom_bwd would change none of it
        ("return torch.softmax(x, -1)", "(y,) = ctx.saved_tensors\nreturn torch._softmax_backward_data(grad, y, -1, y.dtype), None", True),
        ("return torch.exp(x)", "return grad * 2, None", True),
        # ... but reductions, `**` and `1 / t` are on its float32 list (beyond the ops that make a Function sensitive)
        ("return torch.softmax(x, -1)", "(y,) = ctx.saved_tensors\nreturn y * (grad - (grad * y).sum(-1, keepdim=True)), None", False),
        ("return torch.exp(x)", "(x,) = ctx.saved_tensors\nreturn grad * x ** 2, None", False),
        ("return torch.exp(x)", "(x,) = ctx.saved_tensors\nreturn grad * (1 / x), None", False),
        # what the backward cannot see
        ("return torch.exp(x)", "return ctx.run_function(grad), None", False),
    ],
)
def test_a_function_that_upcasts_by_hand(forward: str, backward: str, by_hand: bool) -> None:
    helpers = """
    def stats(t):
        return torch.logsumexp(t.float(), -1)

    def log_softmax(t):
        return t.float() - torch.logsumexp(t.float(), -1, keepdim=True)

    def matmul_helper(a, b):
        return torch.matmul(a, b)
    """
    fwd, bwd, model = passes("ctx.save_for_backward(x)\n" + forward, backward, helpers)
    assert upcasts_by_hand(fwd, bwd, model) is by_hand


def test_a_custom_bwd_without_custom_fwd_is_no_hand_written_pair() -> None:
    """custom_bwd reads the autocast state custom_fwd records on ctx: without custom_fwd it
    raises in backward, whatever the backward computes, so the by-hand shapes do not excuse it."""
    from amplint.engine import check_source

    src = textwrap.dedent("""
    import torch
    class F(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return torch.exp(x)
        @staticmethod
        @torch.amp.custom_bwd(device_type="cuda")
        def backward(ctx, g):
            return g * 2
    with torch.autocast("cuda"):
        y = F.apply(x)
    """)
    lint = lambda text: [(d.span.line, d.code) for d in check_source(text, "<string>", select=["AMP205"])]  # noqa: E731
    assert lint(src) == [(3, "AMP205")]
    assert lint(src.replace('    @torch.amp.custom_bwd(device_type="cuda")\n', "")) == []  # both by hand: nothing to change


@pytest.mark.parametrize("body, sensitive", [
    # every operand an FFT's result (complex): autocast casts floating-point tensors only
    ('return torch.einsum("ij,jk->ik", torch.fft.ifft(grad), torch.fft.fft(grad))', False),
    ('g = torch.fft.fft(grad)\nreturn torch.einsum("ij,jk->ik", g, g)', False),
    # a real operand, an inverse real FFT (real output), or a name bound otherwise too
    ('return torch.einsum("ij,jk->ik", torch.fft.fft(grad).real, grad)', True),
    ('return torch.einsum("ij,jk->ik", torch.fft.irfft(grad), grad)', True),
    ('g = torch.fft.fft(grad)\nif grad.ndim > 2:\n    g = grad.flatten(1)\nreturn torch.einsum("ij,jk->ik", g, g)', True),
    ('with torch.no_grad() as g:\n    pass\ng = torch.fft.fft(grad)\nreturn g.matmul(g)', True),
    # a parameter rebound to an FFT is real where it is used before
    ('a = torch.einsum("ij,jk->ik", grad, grad)\ngrad = torch.fft.fft(grad)\nreturn torch.einsum("ij,jk->ik", grad, grad)', True),
])
def test_ops_on_complex_fft_results_are_not_autocast_sensitive(body: str, sensitive: bool) -> None:
    from amplint.analysis.function_body import autocast_sensitive

    _, backward, model = passes("return x", body)
    assert autocast_sensitive(backward, model) is sensitive
