"""Our RotatE vs PyKEEN's RotatE, side by side in one process on the embedded FB15K-237 subset.

What is compared (same triples, dimensions, batch size and negatives count):

1. Training throughput, in positives per second: each positive is scored against N
   uniform negatives and back-propagated through an Adam step. Ours: tail queries with
   inverse relations for heads (per-query negatives, the paper's setting, and shared
   negatives); PyKEEN: sLCWA with its basic negative sampler (head or tail corrupted).
   Both use the self-adversarial loss (PyKEEN's NSSALoss with margin = gamma).
2. Full filtered evaluation time of the test triples, both directions, all entities as
   candidates, realistic (mean-of-ties) ranks: our ``evaluate_filtered`` vs PyKEEN's
   ``RankBasedEvaluator``.
3. Evaluator agreement: the same trained weights (ours, with tied inverse relations so
   that head prediction equals PyKEEN's head scoring) evaluated by both evaluators.
4. Convergence-ish: each library trains a centralized RotatE on the same number of
   positives (PyKEEN: ``--conv-epochs`` epochs over the triples; ours: half as many
   epochs over the triples plus their inverses) at a smaller size that converges in a
   few minutes on 2 CPU cores; the test MRRs and the training times are printed.

PyKEEN's ``RotatEInteraction`` scores with the L2 norm of the whole complex difference
(hard-coded ``p=2``, whatever ``p`` it is given), while the RotatE paper code (and ours)
sums the modulus of each complex coordinate. So that both libraries train and rank the
same function, PyKEEN's model gets an interaction subclass whose only change is
``p=1`` in that norm (``vector_norm(ord=1)`` of a complex vector is the sum of moduli).

Timings are taken interleaved (ours, PyKEEN, ours, ...) and the best of ``--reps`` is
kept, because the machine may be shared. ``--device cuda`` runs both libraries on the GPU
(our negatives drawn by a CUDA generator, timings synchronized). Run:
``python benchmarks/bench_kge_vs_pykeen.py [--quick] [--device cuda]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmark.kge import FilterIndex, KGEModel, evaluate_filtered, make_queries, train_epoch  # noqa: E402
from data_prep.kg.fb15k237_small import load_fb15k237_small  # noqa: E402


def _pykeen():
    try:
        import pykeen  # noqa: F401  (only to give a clear message when it is missing)
    except ImportError:
        sys.exit("this benchmark needs PyKEEN: pip install pykeen (check that it keeps your torch version)")
    from pykeen.evaluation import RankBasedEvaluator
    from pykeen.losses import NSSALoss
    from pykeen.models import RotatE
    from pykeen.nn.modules import RotatEInteraction
    from pykeen.training import SLCWATrainingLoop
    from pykeen.triples import CoreTriplesFactory
    from pykeen.utils import ensure_complex, negative_norm

    class RotatEL1Interaction(RotatEInteraction):
        """PyKEEN's RotatE interaction with the sum of complex moduli (RotatE paper code)."""

        def forward(self, h, r, t):
            h, r, t = ensure_complex(h, r, t)
            return negative_norm(h * r - t, p=1, power_norm=False)

    return RotatE, RotatEL1Interaction, NSSALoss, SLCWATrainingLoop, CoreTriplesFactory, RankBasedEvaluator


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.device = torch.device(args.device)
        self.data = load_fb15k237_small()
        d = self.data
        self.E, self.R = d.num_entities, d.num_relations
        self.filter = FilterIndex(d.all_triples(), self.E, self.R)
        (self.PkRotatE, self.PkL1, self.NSSALoss, self.SLCWA, self.TF, self.Evaluator) = _pykeen()
        self.tf = self.TF(mapped_triples=d.train, num_entities=self.E, num_relations=self.R, create_inverse_triples=False)

    # ------------------------------------------------------------------ ours
    def ours(self, seed: int = 0, inverse: str = "separate") -> tuple[KGEModel, torch.optim.Optimizer]:
        a = self.args
        m = KGEModel(self.E, self.R, "rotate", dim=a.dim, gamma=a.gamma, inverse=inverse, seed=seed).to(self.device)
        return m, torch.optim.Adam(m.parameters(), lr=a.lr)

    def ours_epoch(self, m: KGEModel, opt: torch.optim.Optimizer, queries: torch.Tensor, shared: bool, gen: torch.Generator) -> float:
        a = self.args
        return train_epoch(m, queries, opt, a.batch_size, a.negatives, "self_adversarial", shared, None, 1.0, gen)

    def ours_eval(self, m: KGEModel, triples: torch.Tensor) -> dict:
        m.eval()
        return evaluate_filtered(m.scorer(), triples, self.filter, batch_size=self.args.eval_batch)

    # ------------------------------------------------------------------ PyKEEN
    def pk(self, seed: int = 0):
        a = self.args
        torch.manual_seed(seed)
        m = self.PkRotatE(triples_factory=self.tf, embedding_dim=a.dim,
                          loss=self.NSSALoss(margin=a.gamma, adversarial_temperature=1.0), random_seed=seed)
        m.interaction = self.PkL1()
        m = m.to(self.device)
        opt = torch.optim.Adam(m.get_grad_params(), lr=a.lr)
        loop = self.SLCWA(model=m, triples_factory=self.tf, optimizer=opt, negative_sampler="basic",
                          negative_sampler_kwargs={"num_negs_per_pos": a.negatives})
        return m, loop

    def pk_epoch(self, loop) -> None:
        # PyKEEN re-initializes the weights unless continue_training (refused on a first call)
        first = not getattr(loop, "_bench_trained", False)
        loop._bench_trained = True
        # and counts num_epochs from its own epoch counter
        loop.train(triples_factory=self.tf, num_epochs=loop._epoch + 1, batch_size=self.args.batch_size, use_tqdm=False,
                   use_tqdm_batch=False, sub_batch_size=self.args.batch_size,
                   continue_training=not first)

    def pk_eval(self, m, triples: torch.Tensor) -> dict:
        ev = self.Evaluator(filtered=True)
        d = self.data
        res = ev.evaluate(m, triples, additional_filter_triples=[d.train, d.valid, d.test], batch_size=self.args.eval_batch,
                          slice_size=None, use_tqdm=False)
        return {"mrr": float(res.get_metric("both.realistic.inverse_harmonic_mean_rank")),
                "hits@1": float(res.get_metric("both.realistic.hits_at_1")),
                "hits@10": float(res.get_metric("both.realistic.hits_at_10"))}

    def copy_into_pykeen(self, ours: KGEModel, pk) -> None:
        """Our [re | im] entity rows and phase-valued relations into PyKEEN's interleaved complex storage."""
        k = self.args.dim
        with torch.no_grad():
            ent = ours.entity.detach()
            pk_ent = torch.stack([ent[:, :k], ent[:, k:]], dim=-1).reshape(self.E, 2 * k)
            phase = ours.decoder.relation[: self.R].detach() / (ours.decoder.embedding_range / torch.pi)
            pk_rel = torch.stack([torch.cos(phase), torch.sin(phase)], dim=-1).reshape(self.R, 2 * k)
            pk.entity_representations[0]._embeddings.weight.copy_(pk_ent)
            pk.relation_representations[0]._embeddings.weight.copy_(pk_rel)


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def best_time(fn, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        _sync()
        t = time.perf_counter()
        fn()
        _sync()
        best = min(best, time.perf_counter() - t)
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=256, help="complex dimension (entity 2*dim reals; paper: 256)")
    ap.add_argument("--gamma", type=float, default=12.0)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--negatives", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-batch", type=int, default=256)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6, help="training batches per throughput measurement")
    ap.add_argument("--conv-dim", type=int, default=32, help="complex dimension of the convergence runs")
    ap.add_argument("--conv-negatives", type=int, default=64)
    ap.add_argument("--conv-batch", type=int, default=512)
    ap.add_argument("--conv-lr", type=float, default=5e-3)
    ap.add_argument("--conv-epochs", type=int, default=40, help="PyKEEN epochs over the triples (ours: half, over triples + inverses)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave the default)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N: both libraries train and evaluate there")
    ap.add_argument("--quick", action="store_true", help="tiny settings for a smoke run")
    args = ap.parse_args(argv)
    if args.quick:
        args.dim, args.reps, args.steps, args.conv_dim, args.conv_epochs = 32, 1, 2, 16, 2
    if args.threads:
        torch.set_num_threads(args.threads)
    from tabulate import tabulate

    b = Bench(args)
    d = b.data
    print(f"data: fb15k237_small, {b.E} entities, {b.R} relations, train {len(d.train)}, valid {len(d.valid)}, test {len(d.test)}; "
          f"dim {args.dim} (complex), batch {args.batch_size}, negatives {args.negatives}, device {b.device}, "
          f"torch threads {torch.get_num_threads()}")

    # 1. training throughput ------------------------------------------------------
    n_pos = args.steps * args.batch_size
    gen = torch.Generator().manual_seed(0)
    queries = make_queries(d.train, b.R)
    sub = queries[torch.randperm(len(queries), generator=gen)[:n_pos]].to(b.device)
    ours_m, ours_opt = b.ours()
    pk_m, pk_loop = b.pk()
    pk_tf_full = b.tf
    b.tf = b.TF(mapped_triples=d.train[torch.randperm(len(d.train), generator=gen)[:n_pos]], num_entities=b.E,
                num_relations=b.R, create_inverse_triples=False)
    pk_loop.triples_factory = b.tf
    if b.device.type != "cpu":  # our negatives and shuffles drawn on the device (the CPU keeps its stream)
        gen = torch.Generator(device=b.device).manual_seed(0)
    b.ours_epoch(ours_m, ours_opt, sub[: args.batch_size], False, gen)  # warm-up
    b.pk_epoch(pk_loop)
    t_pq, t_sh, t_pk = float("inf"), float("inf"), float("inf")
    for _ in range(args.reps):
        t_pq = min(t_pq, best_time(lambda: b.ours_epoch(ours_m, ours_opt, sub, False, gen), 1))
        t_pk = min(t_pk, best_time(lambda: b.pk_epoch(pk_loop), 1))
        t_sh = min(t_sh, best_time(lambda: b.ours_epoch(ours_m, ours_opt, sub, True, gen), 1))
    b.tf = pk_tf_full
    rows = [
        ["ours, per-query negatives", f"{n_pos / t_pq:,.0f}", f"{t_pk / t_pq:.2f}x"],
        ["ours, shared negatives", f"{n_pos / t_sh:,.0f}", f"{t_pk / t_sh:.2f}x"],
        ["PyKEEN sLCWA (basic sampler)", f"{n_pos / t_pk:,.0f}", "1.00x"],
    ]
    print("\nTraining throughput (positives/s, best of reps; each positive vs", args.negatives, "negatives)")
    print(tabulate(rows, headers=["", "positives/s", "speed-up vs PyKEEN"], tablefmt="github"))

    # 2. evaluation time ------------------------------------------------------------
    test = d.test
    e_ours = e_pk = float("inf")
    for _ in range(args.reps):
        e_ours = min(e_ours, best_time(lambda: b.ours_eval(ours_m, test), 1))
        e_pk = min(e_pk, best_time(lambda: b.pk_eval(pk_m, test), 1))
    print(f"\nFull filtered evaluation of {len(test)} test triples x 2 directions over {b.E} candidates (best of reps)")
    print(tabulate([["ours", f"{e_ours:.3f}", f"{e_pk / e_ours:.2f}x"], ["PyKEEN RankBasedEvaluator", f"{e_pk:.3f}", "1.00x"]],
                   headers=["", "seconds", "speed-up vs PyKEEN"], tablefmt="github"))

    # 3 + 4. convergence on equal positives, then agreement of the evaluators ----------
    for name in ("dim", "negatives", "batch_size", "lr"):
        setattr(args, name, getattr(args, "conv_" + {"batch_size": "batch"}.get(name, name)))
    t0 = time.perf_counter()
    ours_final, ours_opt = b.ours(seed=1, inverse="tied")
    g = torch.Generator(device=b.device).manual_seed(1)
    queries = queries.to(b.device)
    for _ in range(max(1, args.conv_epochs // 2)):
        b.ours_epoch(ours_final, ours_opt, queries, False, g)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    pk_final, pk_loop = b.pk(seed=1)
    for _ in range(args.conv_epochs):
        b.pk_epoch(pk_loop)
    t_pk = time.perf_counter() - t0
    r_ours = b.ours_eval(ours_final, test)
    r_pk = b.pk_eval(pk_final, test)
    print(f"\nCentralized RotatE to convergence-ish: dim {args.dim} (complex), batch {args.batch_size}, "
          f"{args.negatives} negatives, Adam lr {args.lr}, self-adversarial loss; filtered test metrics, "
          "both directions, realistic ranks")
    print(tabulate([
        ["ours (tied inverse)", max(1, args.conv_epochs // 2) * len(queries), f"{t_ours:.0f}",
         f"{r_ours['mrr']:.4f}", f"{r_ours['hits@1']:.4f}", f"{r_ours['hits@10']:.4f}"],
        ["PyKEEN (sLCWA, NSSA)", args.conv_epochs * len(d.train), f"{t_pk:.0f}",
         f"{r_pk['mrr']:.4f}", f"{r_pk['hits@1']:.4f}", f"{r_pk['hits@10']:.4f}"],
    ], headers=["", "positives seen", "train seconds", "MRR", "Hits@1", "Hits@10"], tablefmt="github"))

    pk_copy, _ = b.pk(seed=0)
    b.copy_into_pykeen(ours_final, pk_copy)
    r_copy = b.pk_eval(pk_copy, test)
    print(f"\nEvaluator agreement on our trained weights: ours MRR {r_ours['mrr']:.6f}, PyKEEN MRR {r_copy['mrr']:.6f}, "
          f"|diff| {abs(r_ours['mrr'] - r_copy['mrr']):.2e}")


if __name__ == "__main__":
    main()
