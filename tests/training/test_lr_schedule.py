"""dataflow.training.lr_schedule against PyTorch's schedulers (the oracle): LinearLR for the warmup, then
CosineAnnealingLR down to the floor, as torch.optim.lr_scheduler.SequentialLR chains them."""
import pytest

from dataflow.training.lr_schedule import FLOOR, lr_at, warmup_steps


@pytest.mark.parametrize("horizon", [2, 5, 20, 40, 800])
def test_schedule_is_torchs_linear_warmup_then_cosine_to_the_floor(horizon):
    torch = pytest.importorskip("torch")
    peak = 2e-3
    warmup = warmup_steps(horizon)
    assert warmup == max(1, round(0.05 * horizon))
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=peak)
    # the warmup's last step is the cosine's first (the peak); the horizon's step its last (the floor)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=horizon - warmup, eta_min=FLOOR * peak)
    if warmup > 1:
        ramp = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1 / warmup, total_iters=warmup - 1)
        schedule = torch.optim.lr_scheduler.SequentialLR(opt, [ramp, schedule], milestones=[warmup - 1])
    want = []
    for _ in range(horizon):  # torch's lr for optimizer step s (1-based) is the scheduler's at epoch s - 1
        want.append(opt.param_groups[0]["lr"])
        opt.step()
        schedule.step()
    got = [lr_at(step, peak, horizon) for step in range(1, horizon + 1)]
    assert got == pytest.approx(want, rel=1e-9)
    assert got[warmup - 1] == pytest.approx(peak, rel=1e-12) and got[-1] == pytest.approx(FLOOR * peak, rel=1e-12)


def test_schedule_stays_at_the_floor_past_its_horizon():
    assert [lr_at(s, 1e-3, 100) for s in (100, 101, 10_000)] == [pytest.approx(1e-4, rel=1e-12)] * 3
    assert lr_at(1, 1e-3, 1) == 1e-3  # a one-step schedule is its warmup's one step
