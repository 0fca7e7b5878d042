"""``cosearch catalog [--gpu ID] [--provider P] [--catalog FILE ...] [--csv FILE] [--json]``."""
from __future__ import annotations

import argparse
import json
import math

from rich.table import Table

from ._console import console
from .. import hardware
from ..cloud.catalog import load_catalog
from .._files import write_output
from ..errors import CosearchError
from ..model.profile import DEFAULT_PROFILE
from ..storages._writer import jsonable


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("catalog", help="list cloud instance types with on-demand/spot prices and revocation rates, "
                                       "and every GPU's measured or assumed GEMM efficiency")
    p.add_argument("--gpu", help="only this GPU catalog id: its instances (if any), hardware and efficiency with sources")
    p.add_argument("--provider", help="only this provider (aws, gcp, azure, lambda, coreweave, or your own)")
    p.add_argument("--catalog", action="append", default=[], metavar="FILE",
                   help="extra catalog YAML overriding/extending the shipped one (repeatable; e.g. negotiated prices)")
    p.add_argument("--csv", metavar="FILE", help="also write the table as CSV")
    p.add_argument("--json", action="store_true", help="print JSON: with --gpu an object, the GPU's catalog entry and "
                                                       "its instance types; without, a list of such objects, one per "
                                                       "catalog GPU (instances [] for a GPU nobody rents)")
    p.set_defaults(func=run)


def _money(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.2f}"


def _efficiency(entry: dict) -> str:
    """The bf16 large-GEMM fraction of a GPU catalog entry, ``*`` when assumed."""
    return f"{entry['efficiency']['large_gemm_bf16']:.2f}" + ("" if entry["efficiency_measured"] else "*")


def _efficiency_fp8(entry: dict) -> str:
    """The fp8 large-GEMM fraction, ``*`` when assumed, ``not measured`` where the model's default applies."""
    status = entry["efficiency_fp8"]
    if status in ("measured", "assumed"):
        return f"{entry['efficiency']['large_gemm_fp8']:.2f}" + ("*" if status == "assumed" else "")
    return "not measured" if status == "default" else "-"


def _measured(entry: dict) -> str:
    """Which of a GPU's GEMM efficiencies come from a public measurement (the flag is per precision)."""
    if not entry["efficiency_measured"]:
        return "no (assumed, *)"
    return "bf16 only" if entry["efficiency_fp8"] == "default" else "yes"


def _fp8_eta(entry: dict) -> float | None:
    """The fp8 matmul efficiency the shipped profile uses, None for a GPU without fp8."""
    if entry["efficiency_fp8"] == "none":
        return None
    return hardware.fp8_eta_used(entry, DEFAULT_PROFILE.fp8_matmul_relative)


def _eta_fp8(entry: dict) -> str:
    """:func:`_fp8_eta` as the table shows it, "-" for a GPU without fp8."""
    eta = _fp8_eta(entry)
    return "-" if eta is None else f"{eta:.3f}"


def _instance_table(df) -> Table:
    """One row per rentable instance type, with its prices and revocation rate."""
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
    return t


def _hardware_table(gpu_id: str) -> Table:
    """The datasheet numbers and the full efficiency source of one GPU: what a scenario with ``cluster.gpu`` uses."""
    e = hardware.gpu(gpu_id)
    t = Table(title=f"{gpu_id}: {e['name']} (cosearch/data/gpus.yaml)", title_justify="left", show_header=False)
    t.add_column("field"); t.add_column("value", overflow="fold")
    t.add_row("peak TFLOP/s (dense)", ", ".join(f"{k} {v:g}" for k, v in e["peak_tflops"].items() if v))
    t.add_row("memory", f"{e['hbm_gib']:g} GiB at {e['hbm_tbps']:g} TB/s")
    t.add_row("scale-up", f"{e['nvlink_gbps']:g} GB/s per direction, {e['nvlink_domain']} GPUs per domain, "
                          f"{e['gpus_per_node']} per node")
    t.add_row("network", f"{e['network_gbps']:g} Gb/s per GPU")
    t.add_row("power", f"{e['power_w']:g} W")
    price = e["price_usd_per_gpu_hour"]
    t.add_row("price", f"{_money(price)} USD per GPU-hour " + (
        "(no public price: set cluster.price_usd_per_gpu_hour for costs)" if math.isnan(price) else "(reference on-demand)"))
    if e["efficiency_assumption"]:
        t.add_row("GEMM efficiency assumed", e["efficiency_assumption"])
    t.add_row("GEMM efficiency source", e["efficiency_source"])
    return t


def _efficiency_table(gpu_ids: list[str], instances: dict[str, int]) -> Table:
    """Large-GEMM efficiency per GPU and precision, measured or assumed, with the number of matching instance types."""
    g = Table(title="GPU efficiency (large-GEMM fraction of the dense bf16 / fp8 peak, * = assumed from a similar GPU; "
                    "the model's matmul efficiency eta scales from it, H100 SXM = 0.707; fp8 not measured: eta fp8 = eta x "
                    f"profile.fp8_matmul_relative {DEFAULT_PROFILE.fp8_matmul_relative:g}; full sources: cosearch catalog "
                    "--gpu ID)", title_justify="left")
    for col, just in (("GPU", "left"), ("GEMM eff bf16", "right"), ("GEMM eff fp8", "right"), ("eta", "right"),
                      ("eta fp8", "right"), ("measured", "left"), ("instances", "right")):
        g.add_column(col, justify=just, no_wrap=True)
    g.add_column("source", max_width=60, no_wrap=True, overflow="ellipsis")  # its start; --gpu prints it whole
    for gid in gpu_ids:
        e = hardware.gpu(gid)
        g.add_row(gid, _efficiency(e), _efficiency_fp8(e), f"{e['matmul_efficiency']:.3f}", _eta_fp8(e),
                  _measured(e), str(instances.get(gid, 0)), e["efficiency_source"])
    return g


def _gpu_record(gpu_id: str, n_instances: int) -> dict:
    """What ``--gpu ID`` prints as text, as data: the catalog entry (datasheet numbers, efficiency and their
    sources; a missing price is null), the fp8 eta the shipped profile uses (null without fp8) and the number of
    matching instance types."""
    e = hardware.gpu(gpu_id)
    return jsonable({"id": gpu_id, **e, "matmul_efficiency_fp8_used": _fp8_eta(e), "instance_types": n_instances})


def run(args: argparse.Namespace) -> int:
    cat = load_catalog(args.catalog or None)
    df = cat.table(gpu=args.gpu, provider=args.provider)
    if df.empty and not args.gpu:
        raise CosearchError("catalog", "no instance type matches the filters")
    if args.csv:
        write_output("--csv", args.csv, lambda p: df.to_csv(p, index=False))
    if args.json:
        rows = json.loads(df.to_json(orient="records")) if not df.empty else []
        # every GPU the text's efficiency table lists, each as --gpu ID --json prints it (its entry too: a GPU
        # nobody rents printed [] and nothing about it, and without --gpu was left out)
        gpus = [args.gpu] if args.gpu else list(hardware.catalog())
        records = []
        for gid in gpus:
            mine = [r for r in rows if r["gpu"] == gid]
            records.append({"gpu": _gpu_record(gid, len(mine)), "instances": mine})
        print(json.dumps(records[0] if args.gpu else records, indent=2, allow_nan=False))
        return 0
    out = console()
    if df.empty:  # a catalog GPU nobody rents (gb300, h800, mi300x): its entry still serves scenarios
        out.print(f"{args.gpu}: no rentable instance type in the catalog" + (f" from {args.provider}" if args.provider else "")
                  + "; scenarios can still use it as cluster.gpu")
    else:
        out.print(_instance_table(df))
    if args.gpu:
        out.print(_hardware_table(args.gpu))
    instances = {} if df.empty else df["gpu"].value_counts().to_dict()
    out.print(_efficiency_table([args.gpu] if args.gpu else list(hardware.catalog()), instances))
    return 0
