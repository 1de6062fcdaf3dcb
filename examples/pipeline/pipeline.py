#!/usr/bin/python3
"""The steps of examples/pipeline/Snakefile, one subcommand each (numpy only):

  pipeline.py market DATE SYMBOL OUT.csv        one day of one-minute bars, synthetic
  pipeline.py features DATE OUT.npy BARS.csv... features and next-bar return, every symbol
  pipeline.py dataset OUT.npy FEATURES.npy...   the training rows of several days
  pipeline.py backtest WEIGHTS FEATURES OUT.json  the trained model trading a held-out day
  pipeline.py report EVENTS OUT.txt BACKTEST.json...  one table of every held-out day

Everything is a pure function of its inputs and of (date, symbol): rerunning a step, on
any backend, writes the same bytes.
"""
import json
import struct
import sys
import zlib

import numpy as np

BARS = 390  # one-minute bars in a 09:30-16:00 session
WARMUP = 10  # bars before the first feature row (the rolling window)
FEATURES = 8  # columns of a feature row; one more column is the target
COST_BPS = 0.5  # paid per unit of position traded
BARS_PER_YEAR = BARS * 252


def market(date, symbol, out):
    """Bars with a weak, nonlinear edge: the next return leans on the order-flow imbalance."""
    rng = np.random.default_rng(zlib.crc32(f"{date}:{symbol}".encode()))
    imbalance = np.zeros(BARS)
    returns = np.zeros(BARS)  # basis points, bar t's close against bar t-1's
    for t in range(1, BARS):
        imbalance[t] = 0.8 * imbalance[t - 1] + 0.6 * rng.standard_normal()
        returns[t] = 0.6 * np.tanh(2.0 * imbalance[t - 1]) - 0.1 * returns[t - 1] + 6.0 * rng.standard_normal()
    price = 100.0 * np.exp(np.cumsum(returns) * 1e-4)
    volume = np.round(rng.lognormal(8.0, 0.5, BARS) * (1.0 + np.abs(imbalance)))
    with open(out, "w") as f:
        f.write("minute,price,volume,imbalance\n")
        for t in range(BARS):
            f.write(f"{t},{price[t]:.6f},{volume[t]:.0f},{imbalance[t]:.6f}\n")


def bars(path):
    table = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    if table.shape != (BARS, 4):
        sys.exit(f"pipeline.py: error: {path}: expected {BARS} bars of 4 columns, found {table.shape}")
    return table


def symbol_rows(table):
    """Feature rows of one symbol's day: t in [WARMUP, BARS-1), target the return of t+1."""
    price, volume, imbalance = table[:, 1], table[:, 2], table[:, 3]
    r = np.zeros(BARS)
    r[1:] = np.diff(np.log(price)) * 1e4
    logv = np.log(volume)
    rows = []
    for t in range(WARMUP, BARS - 1):
        window = r[t - WARMUP + 1 : t + 1]
        rows.append([r[t] / 10, r[t - 1] / 10, r[t - 2] / 10, r[t - 3] / 10, imbalance[t], imbalance[t - 1],
                     window.std() / 10, (logv[t] - logv[: t + 1].mean()), r[t + 1] / 10])
    return rows


def features(date, out, paths):
    rows = [row for path in paths for row in symbol_rows(bars(path))]
    np.save(out, np.asarray(rows, dtype="<f4"))


def dataset(out, paths):
    np.save(out, np.concatenate([np.load(p) for p in paths]).astype("<f4"))


def load_safetensors(path):
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        data = f.read()
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            sys.exit(f"pipeline.py: error: {path}: tensor {name} is {t['dtype']}, expected F32")
        begin, end = t["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(t["shape"])
    return tensors


def predict(tensors, x):
    """rtrain run's MLP (--activation relu): z = x·Wᵀ + b, relu between layers."""
    layers = sum(1 for name in tensors if name.endswith(".weight"))
    for l in range(layers):
        x = x @ tensors[f"layers.{l}.weight"].T.astype(np.float64) + tensors[f"layers.{l}.bias"]
        if l + 1 < layers:
            x = np.maximum(x, 0.0)
    return x[:, 0]


def backtest(weights, path, out):
    """Each symbol trades the model's view, sized and capped at one unit, paying COST_BPS
    per unit traded (in from flat at the open, out to flat at the close); the book's P&L
    per bar is the sum over symbols."""
    table = np.load(path).astype(np.float64)
    pred = predict(load_safetensors(weights), table[:, :FEATURES])
    per_symbol = BARS - 1 - WARMUP
    symbols = len(table) // per_symbol
    scale = 2.0 * pred.std() if pred.std() > 0 else 1.0
    pos = np.clip(pred / scale, -1.0, 1.0).reshape(symbols, per_symbol)
    realized = (table[:, FEATURES] * 10).reshape(symbols, per_symbol)  # basis points
    flat = np.zeros((symbols, 1))
    trades = np.abs(np.diff(np.hstack([flat, pos, flat]), axis=1))
    book = (pos * realized - COST_BPS * trades[:, :-1]).sum(axis=0)
    book[-1] -= COST_BPS * trades[:, -1].sum()
    bets = pos != 0
    result = {
        "date": path.rsplit("/", 1)[-1].removesuffix(".npy"),
        "symbols": symbols,
        "bars": per_symbol,
        "pnl_bps": round(float(book.sum()), 2),
        "sharpe": round(float(book.mean() / book.std() * np.sqrt(BARS_PER_YEAR)) if book.std() > 0 else 0.0, 2),
        "turnover": round(float(trades.sum() / (symbols * per_symbol)), 4),
        "hit_rate": round(float((bets & (np.sign(pos) == np.sign(realized))).sum() / max(bets.sum(), 1)), 4),
    }
    with open(out, "w") as f:
        json.dump(result, f)
        f.write("\n")


def report(events, out, paths):
    results = sorted((json.load(open(p)) for p in paths), key=lambda r: r["date"])
    summary = [e for e in map(json.loads, open(events)) if e.get("event") == "summary"]
    if not summary:
        sys.exit(f"pipeline.py: error: {events}: no summary record (did the training run end?)")
    s = summary[-1]
    lines = [f"model: {s['steps']} steps on {s['world_size']} ranks, eval loss {s['eval_loss']:.4f}, "
             f"{s['checkpoints']} checkpoints"]
    lines.append(f"{'date':<12}{'symbols':>8}{'bars':>6}{'pnl_bps':>10}{'sharpe':>8}{'turnover':>10}{'hit_rate':>10}")
    for r in results:
        lines.append(f"{r['date']:<12}{r['symbols']:>8}{r['bars']:>6}{r['pnl_bps']:>10.2f}{r['sharpe']:>8.2f}"
                     f"{r['turnover']:>10.4f}{r['hit_rate']:>10.4f}")
    total = sum(r["pnl_bps"] for r in results)
    lines.append(f"{'total':<12}{'':>8}{sum(r['bars'] for r in results):>6}{total:>10.2f}")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


def main(argv):
    steps = {
        "market": (3, lambda a: market(a[0], a[1], a[2])),
        "features": (3, lambda a: features(a[0], a[1], a[2:])),
        "dataset": (2, lambda a: dataset(a[0], a[1:])),
        "backtest": (3, lambda a: backtest(a[0], a[1], a[2])),
        "report": (3, lambda a: report(a[0], a[1], a[2:])),
    }
    if not argv or argv[0] not in steps or len(argv) - 1 < steps[argv[0]][0]:
        sys.exit("usage: pipeline.py market|features|dataset|backtest|report ARGS (see its docstring)")
    steps[argv[0]][1](argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
