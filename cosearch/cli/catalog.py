"""``cosearch catalog [--gpu ID] [--provider P] [--catalog FILE ...] [--csv FILE] [--json]``."""
from __future__ import annotations

import argparse
import json
import math

from rich.table import Table

from ._console import console
from ..cloud.catalog import load_catalog
from .._files import write_output
from ..errors import CosearchError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("catalog", help="list cloud instance types with on-demand/spot prices and revocation rates")
    p.add_argument("--gpu", help="only instances with this GPU catalog id")
    p.add_argument("--provider", help="only this provider (aws, gcp, azure, lambda, coreweave, or your own)")
    p.add_argument("--catalog", action="append", default=[], metavar="FILE",
                   help="extra catalog YAML overriding/extending the shipped one (repeatable; e.g. negotiated prices)")
    p.add_argument("--csv", metavar="FILE", help="also write the table as CSV")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=run)


def _money(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.2f}"


def _efficiency(r) -> str:
    return f"{r['large_gemm_bf16']:.2f}" + ("" if r["efficiency_measured"] else "*")


def run(args: argparse.Namespace) -> int:
    cat = load_catalog(args.catalog or None)
    df = cat.table(gpu=args.gpu, provider=args.provider)
    if df.empty:
        raise CosearchError("catalog", "no instance type matches the filters")
    if args.csv:
        write_output("--csv", args.csv, lambda p: df.to_csv(p, index=False))
    if args.json:
        print(json.dumps(json.loads(df.to_json(orient="records")), indent=2))
        return 0
    t = Table(title="cloud instance catalog (USD per instance-hour; list prices, see price_date and docs/cloud.md)", title_justify="left")
    for col, just in (("provider", "left"), ("instance", "left"), ("GPUs", "right"), ("NVLink", "left"),
                      ("net Gb/s", "right"), ("on-demand", "right"), ("spot", "right"), ("$/GPU-h od", "right"),
                      ("$/GPU-h spot", "right"), ("revoc/inst-h", "right"), ("regions", "left"), ("date", "left")):
        t.add_column(col, justify=just)
    for r in df.to_dict(orient="records"):
        rev = r["revocation_per_hour"]
        t.add_row(r["provider"], r["instance"], f"{r['gpus']} x {r['gpu']}",
                  "yes" if r["nvlink"] else "no", f"{r['network_gbps']:g}", _money(r["on_demand_usd_per_hour"]),
                  _money(r["spot_usd_per_hour"]), _money(r["on_demand_usd_per_gpu_hour"]), _money(r["spot_usd_per_gpu_hour"]),
                  "-" if rev is None or (isinstance(rev, float) and math.isnan(rev)) else f"{rev:.4g}",
                  r["regions"], str(r["price_date"]))
    console().print(t)
    g = Table(title="GPU efficiency (large-GEMM fraction of the dense bf16 peak; the model's matmul efficiency scales "
                    "from it, H100 SXM = 0.707; sources in cosearch/data/gpus.yaml, --json lists them)", title_justify="left")
    for col, just in (("GPU", "left"), ("GEMM eff", "right"), ("model eta", "right"), ("measured", "left")):
        g.add_column(col, justify=just)
    seen = {}
    for r in df.to_dict(orient="records"):
        seen.setdefault(r["gpu"], r)
    for gid, r in seen.items():
        g.add_row(gid, _efficiency(r), f"{r['matmul_efficiency']:.3f}",
                  "yes" if r["efficiency_measured"] else "no (assumed, *)")
    console().print(g)
    return 0
