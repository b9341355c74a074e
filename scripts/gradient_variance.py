"""Score-function vs reparameterised ELBO gradients on ``blr``: both unbiased, very different variance.

Usage: python scripts/gradient_variance.py [--score 2000] [--reparam 400]
"""

import argparse

import numpy as np

from pyro_bdl.bench.gradient_variance import compare_estimators


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--score", type=int, default=2000, help="score-function gradient draws")
    parser.add_argument("--reparam", type=int, default=400, help="reparameterised gradient draws")
    args = parser.parse_args(argv)
    out = compare_estimators("blr", args.score, args.reparam)
    np.set_printoptions(precision=2, suppress=True, linewidth=120)
    print("ELBO-loss gradient w.r.t. the mean-field guide of blr (known noise), one particle per draw")
    print(f"  exact (closed-form ELBO):   {out['exact']}")
    for name, num in (("score", args.score), ("reparam", args.reparam)):
        z = np.abs(out[f"{name}_mean"] - out["exact"]) / out[f"{name}_se"]
        print(f"  {name:<8} mean of {num:>5}: {out[f'{name}_mean']}  (max |error| / s.e. = {z.max():.2f})")
    print(f"  one-draw total variance: score {out['score_variance']:.4g}, reparam {out['reparam_variance']:.4g}")
    print(f"  variance ratio score / reparam: {out['variance_ratio']:.0f}")


if __name__ == "__main__":
    main()
