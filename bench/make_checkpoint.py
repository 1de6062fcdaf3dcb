#!/usr/bin/python3
"""Writes a realistic training checkpoint directory for the rckpt benchmark.

Independent of rkit's C++ code: safetensors files are written here from the published
layout (8-byte little-endian header length N, N bytes of JSON padded with spaces so that
8 + N is a multiple of 8, then raw little-endian tensor data; data_offsets are relative
to the start of the data). Numbers come from a fixed seed, so two runs give the same
bytes. Tensors are generated in chunks, so memory stays at a few tens of MiB.

  make_checkpoint.py OUT_DIR [--bytes N] [--seed S]
      model.safetensors       fp32 weights ~ N(0, 0.02): per layer 4 attention matrices
                              [1024,1024] (exactly 4 MiB each), MLP [2048,1024] and
                              [1024,2048], norm weights and biases; embeddings and
                              lm_head [4096,4096]
      optimizer.safetensors   fp32 Adam moments per weight: exp_avg ~ N(0, 1e-3),
                              exp_avg_sq ~ N(0, 1e-3)**2, and a step counter
      model_bf16.safetensors  the same weights as bf16 (round to nearest even)
      config.json, trainer_state.json, tokenizer.json (a few hundred KB of text),
      rng_state.bin (16 KiB of random bytes)
    The number of layers is the smallest that makes the directory at least N bytes
    (default 1 GiB): fp32 weights are about 2/7 of it, optimizer 4/7, bf16 1/7.

  make_checkpoint.py --mutate SRC_DIR DST_DIR [--fraction 0.1] [--seed S]
      Copies SRC_DIR to DST_DIR, then changes FRACTION of the tensors of every
      safetensors file (by count, chosen with the seed) to old + small noise, as one
      training step would; every other tensor stays bit-identical. trainer_state.json
      and rng_state.bin change too, as they do at every step. Prints a summary line on
      stderr.
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

CHUNK = 4 << 20  # elements per generated chunk (16 MiB of fp32)
DIM, MLP, BIG = 1024, 2048, 4096
ITEM = {'F32': 4, 'BF16': 2, 'I64': 8}


def bf16_bits(f32):
    """float32 array -> uint16 bf16 bits, round to nearest even (no NaNs here)."""
    bits = f32.view('<u4')
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    return ((bits + rounding) >> 16).astype('<u2')


def bf16_to_f32(bits):
    return (bits.astype('<u4') << 16).view('<f4')


def header_bytes(entries, metadata):
    """entries: list of (name, dtype, shape); data laid out in list order."""
    header, offset = {}, 0
    for name, dtype, shape in entries:
        n = ITEM[dtype] * int(np.prod(shape, dtype=np.int64))
        header[name] = {'dtype': dtype, 'shape': list(shape), 'data_offsets': [offset, offset + n]}
        offset += n
    if metadata:
        header['__metadata__'] = metadata
    text = json.dumps(header, separators=(',', ':')).encode()
    text += b' ' * (-(8 + len(text)) % 8)
    return struct.pack('<Q', len(text)) + text, offset


def read_header(path):
    with open(path, 'rb') as f:
        (n,) = struct.unpack('<Q', f.read(8))
        header = json.loads(f.read(n))
    header.pop('__metadata__', None)
    return 8 + n, header


def model_params(layers):
    """(name, shape, kind) in file order; kind: 'w' matrix, 'one' norm, 'zero' bias."""
    p = [('embed.weight', (BIG, BIG), 'w')]
    for i in range(layers):
        L = f'layers.{i}.'
        p += [(L + 'attn_norm.weight', (DIM,), 'one')]
        p += [(L + f'attn.{m}', (DIM, DIM), 'w') for m in ('wq', 'wk', 'wv', 'wo')]
        p += [(L + 'attn.wo.bias', (DIM,), 'zero'), (L + 'mlp_norm.weight', (DIM,), 'one'),
              (L + 'mlp.up', (MLP, DIM), 'w'), (L + 'mlp.up.bias', (MLP,), 'zero'),
              (L + 'mlp.down', (DIM, MLP), 'w'), (L + 'mlp.down.bias', (DIM,), 'zero')]
    p += [('final_norm.weight', (BIG,), 'one'), ('lm_head.weight', (BIG, BIG), 'w')]
    return p


def numel(shape):
    return int(np.prod(shape, dtype=np.int64))


def layers_for(total_bytes):
    # fp32 weights + 2 fp32 moments + bf16 copy = 14 bytes per parameter.
    fixed = sum(numel(s) for _, s, _ in model_params(0))
    per_layer = sum(numel(s) for _, s, _ in model_params(1)) - fixed
    need = max(0, total_bytes - 600_000) / 14 - fixed  # minus the small files
    return max(1, -(-int(need) // per_layer))


def chunks(count):
    for start in range(0, count, CHUNK):
        yield min(CHUNK, count - start)


def small_files(out, rng, layers, step):
    config = {'architectures': ['RkitBenchLM'], 'hidden_size': DIM, 'intermediate_size': MLP,
              'num_hidden_layers': layers, 'num_attention_heads': 16, 'vocab_size': BIG,
              'torch_dtype': 'float32', 'rms_norm_eps': 1e-5, 'rope_theta': 10000.0}
    with open(os.path.join(out, 'config.json'), 'w') as f:
        json.dump(config, f, indent=2)
    write_trainer_state(out, step, rng)
    # A BPE-like tokenizer: vocabulary of made-up pieces and merges, ~400 KB of JSON.
    letters = np.array(list('abcdefghijklmnopqrstuvwxyz'))
    pieces = set()
    while len(pieces) < 12000:
        k = int(rng.integers(2, 9))
        pieces.add(('Ġ' if rng.random() < 0.4 else '') + ''.join(rng.choice(letters, k)))
    pieces = sorted(pieces)
    vocab = {p: i for i, p in enumerate(pieces)}
    merges = [f'{p[:len(p) // 2]} {p[len(p) // 2:]}' for p in pieces[:9000]]
    tok = {'version': '1.0', 'truncation': None, 'padding': None,
           'added_tokens': [{'id': i, 'content': f'<|special_{i}|>', 'special': True} for i in range(16)],
           'normalizer': {'type': 'NFC'}, 'pre_tokenizer': {'type': 'ByteLevel', 'add_prefix_space': False},
           'model': {'type': 'BPE', 'dropout': None, 'unk_token': None, 'vocab': vocab, 'merges': merges}}
    with open(os.path.join(out, 'tokenizer.json'), 'w') as f:
        json.dump(tok, f, indent=2, ensure_ascii=False)
    with open(os.path.join(out, 'rng_state.bin'), 'wb') as f:
        f.write(rng.bytes(16384))


def write_trainer_state(out, step, rng):
    log = [{'step': s, 'loss': round(float(8.0 / (1 + s / 500) + rng.normal(0, 0.02)), 4),
            'learning_rate': 3e-4 * min(1.0, s / 200), 'grad_norm': round(float(abs(rng.normal(1, 0.2))), 4)}
           for s in range(10, step + 1, 10)]
    state = {'global_step': step, 'epoch': step / 1000, 'best_metric': None, 'log_history': log}
    with open(os.path.join(out, 'trainer_state.json'), 'w') as f:
        json.dump(state, f, indent=2)


def generate(out, total_bytes, seed):
    os.makedirs(out, exist_ok=True)
    layers = layers_for(total_bytes)
    params = model_params(layers)
    meta = {'format': 'pt', 'producer': 'bench/make_checkpoint.py'}
    m_hdr, _ = header_bytes([(n, 'F32', s) for n, s, _ in params], meta)
    b_hdr, _ = header_bytes([(n, 'BF16', s) for n, s, _ in params], meta)
    opt_entries = [('step', 'I64', ())]
    for n, s, _ in params:
        opt_entries += [(f'state.{n}.exp_avg', 'F32', s), (f'state.{n}.exp_avg_sq', 'F32', s)]
    o_hdr, _ = header_bytes(opt_entries, meta)
    rng_w = np.random.Generator(np.random.PCG64([seed, 1]))
    rng_o = np.random.Generator(np.random.PCG64([seed, 2]))
    with open(os.path.join(out, 'model.safetensors'), 'wb') as fm, \
         open(os.path.join(out, 'model_bf16.safetensors'), 'wb') as fb, \
         open(os.path.join(out, 'optimizer.safetensors'), 'wb') as fo:
        fm.write(m_hdr)
        fb.write(b_hdr)
        fo.write(o_hdr)
        fo.write(np.array(1000, dtype='<i8').tobytes())
        for _, shape, kind in params:
            for n in chunks(numel(shape)):
                if kind == 'w':
                    w = rng_w.standard_normal(n, dtype=np.float32)
                    w *= np.float32(0.02)
                elif kind == 'one':
                    w = np.float32(1.0) + rng_w.standard_normal(n, dtype=np.float32) * np.float32(0.01)
                else:
                    w = rng_w.standard_normal(n, dtype=np.float32) * np.float32(1e-3)
                fm.write(w.astype('<f4', copy=False).tobytes())
                fb.write(bf16_bits(w).tobytes())
            for moment in ('exp_avg', 'exp_avg_sq'):
                for n in chunks(numel(shape)):
                    v = rng_o.standard_normal(n, dtype=np.float32) * np.float32(1e-3)
                    if moment == 'exp_avg_sq':
                        v *= v
                    fo.write(v.astype('<f4', copy=False).tobytes())
    small_files(out, np.random.Generator(np.random.PCG64([seed, 3])), layers, 1000)


def perturb(data, dtype, positive, rng):
    """old + noise at 1% of the chunk's RMS (a small training step)."""
    f = bf16_to_f32(data) if dtype == 'BF16' else data.view('<f4')
    rms = float(np.sqrt(np.mean(f.astype(np.float64) ** 2))) or 1e-6
    g = f + rng.standard_normal(f.size, dtype=np.float32) * np.float32(0.01 * rms)
    if positive:  # second moments stay positive
        np.abs(g, out=g)
    return bf16_bits(g) if dtype == 'BF16' else g.astype('<f4')


def mutate(src, dst, fraction, seed):
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    rng = np.random.Generator(np.random.PCG64([seed, 4]))
    changed = total = changed_bytes = all_bytes = 0
    for name in sorted(os.listdir(dst)):
        if not name.endswith('.safetensors'):
            continue
        path = os.path.join(dst, name)
        start, header = read_header(path)
        names = sorted(k for k, v in header.items() if v['dtype'] in ('F32', 'BF16'))
        k = max(1, round(fraction * len(names)))
        pick = sorted(rng.choice(len(names), size=min(k, len(names)), replace=False))
        total += len(header)
        all_bytes += sum(v['data_offsets'][1] - v['data_offsets'][0] for v in header.values())
        with open(path, 'r+b') as f:
            for i in pick:
                t = header[names[i]]
                begin, end = t['data_offsets']
                item = ITEM[t['dtype']]
                for off in range(begin, end, CHUNK * item):
                    n = min(CHUNK * item, end - off)
                    f.seek(start + off)
                    old = np.frombuffer(f.read(n), dtype='<u2' if item == 2 else '<u4')
                    f.seek(start + off)
                    f.write(perturb(old, t['dtype'], names[i].endswith('_sq'), rng).tobytes())
                changed += 1
                changed_bytes += end - begin
    state = json.load(open(os.path.join(dst, 'trainer_state.json')))
    write_trainer_state(dst, state['global_step'] + 1, np.random.Generator(np.random.PCG64([seed, 3])))
    with open(os.path.join(dst, 'rng_state.bin'), 'wb') as f:
        f.write(rng.bytes(16384))
    print(f'mutated {changed} of {total} tensors, {changed_bytes} of {all_bytes} tensor bytes '
          f'({100 * changed_bytes / all_bytes:.1f}%)', file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('dirs', nargs='+', metavar='DIR')
    ap.add_argument('--bytes', type=int, default=(1 << 30) + (16 << 20), help='at least this many bytes in all')
    ap.add_argument('--seed', type=int, default=20261130)
    ap.add_argument('--mutate', action='store_true', help='copy DIRS[0] to DIRS[1] and change some tensors')
    ap.add_argument('--fraction', type=float, default=0.1)
    a = ap.parse_args()
    if a.mutate:
        if len(a.dirs) != 2:
            ap.error('--mutate needs SRC_DIR DST_DIR')
        mutate(a.dirs[0], a.dirs[1], a.fraction, a.seed)
    else:
        if len(a.dirs) != 1:
            ap.error('give one OUT_DIR')
        generate(a.dirs[0], a.bytes, a.seed)


if __name__ == '__main__':
    main()
