#!/usr/bin/env python3
"""Forges .rkpt archives, valid and hostile, independently of rckpt's own writer.

Follows the format in man/rckpt.1: a ustar archive holding .rkpt/format, one
frames/NNNNNNNN.zst entry per zstd frame, .rkpt/manifest.json (rkit.ckpt.v1) and, last,
.rkpt/index locating the manifest; archive_xxh3 covers every byte before the
manifest's header. Needs python3-xxhash and the zstd program.

  rkpt_forge.py OUT CASE
CASE: ok, tarslip, absolute, symlink_escape, symlink_chain, below_symlink, size_bomb,
      short_frame, shared_frame, v2_schema
"""
import io
import json
import subprocess
import sys
import tarfile
import time

import xxhash


def zstd(raw):
    return subprocess.run(['zstd', '-q', '-c', '--no-check'], input=raw, stdout=subprocess.PIPE, check=True).stdout


def entry(name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(time.time())
    pad = (-len(data)) % 512
    return info.tobuf(format=tarfile.USTAR_FORMAT) + data + b'\0' * pad


def forge(files, frames_data):
    """files: manifest file records without frame fields; frames_data: list of
    (file index, raw bytes, stored zstd bytes, raw_bytes claimed)."""
    out = io.BytesIO()
    out.write(entry('.rkpt/format', b'rkit.ckpt.v1\n'))
    frames, counts = [], {}
    for k, (file, raw, stored, claimed) in enumerate(frames_data):
        header = entry('frames/%08d.zst' % k, stored)
        offset = out.tell() + 512
        out.write(header)
        raw_offset = sum(f['raw_bytes'] for f in frames if f['file'] == file)
        frames.append({'file': file, 'raw_offset': raw_offset, 'raw_bytes': claimed, 'shuffle': 1,
                       'xxh3': xxhash.xxh3_64_hexdigest(raw), 'offset': offset, 'bytes': len(stored)})
        counts.setdefault(file, []).append(k)
    for i, f in enumerate(files):
        if f['type'] == 'file':
            ks = counts.get(i, [])
            f.setdefault('bytes', sum(frames[k]['raw_bytes'] for k in ks))
            f['first_frame'] = ks[0] if ks else 0
            f['frame_count'] = len(ks)
    archive_bytes = out.tell()
    manifest = {'schema': 'rkit.ckpt.v1', 'created_unix_s': time.time(), 'archive_bytes': archive_bytes,
                'archive_xxh3': xxhash.xxh3_64_hexdigest(out.getvalue()), 'bases': [], 'files': files,
                'frames': frames}
    return out, manifest


def finish(out, manifest):
    text = json.dumps(manifest).encode()
    manifest_offset = out.tell() + 512
    out.write(entry('.rkpt/manifest.json', text))
    index = b'rkpt-index v1 %020d %020d %s\n' % (manifest_offset, len(text), xxhash.xxh3_64_hexdigest(text).encode())
    index = index[:-1].ljust(95) + b'\n'
    out.write(entry('.rkpt/index', index))
    out.write(b'\0' * 1024)
    return out.getvalue()


def main():
    path, case = sys.argv[1], sys.argv[2]
    hello = b'hello from a forged archive\n'
    plain = lambda p: {'path': p, 'type': 'file', 'mode': 0o644}
    files, frames = [plain('ok.txt')], [(0, hello, zstd(hello), len(hello))]
    if case == 'tarslip':
        files.append(plain('../evil.txt'))
        frames.append((1, hello, zstd(hello), len(hello)))
    elif case == 'absolute':
        files.append(plain('/tmp/rkpt-forge-evil.txt'))
        frames.append((1, hello, zstd(hello), len(hello)))
    elif case == 'symlink_escape':
        files.append({'path': 'link', 'type': 'symlink', 'target': '../../outside'})
    elif case == 'symlink_chain':
        # Each link alone stays inside; together x points at the parent of the target.
        files.append({'path': 'y', 'type': 'symlink', 'target': '.'})
        files.append({'path': 'x', 'type': 'symlink', 'target': 'y/..'})
    elif case == 'shared_frame':
        # Two files whose frames are the same archive bytes: one small frame for many.
        files.append(plain('copy.txt'))
        frames.append((1, hello, zstd(hello), len(hello)))
    elif case == 'below_symlink':
        files.append({'path': 'dir', 'type': 'symlink', 'target': '.'})
        files.append(plain('dir/x.txt'))
        frames.append((2, hello, zstd(hello), len(hello)))
    elif case == 'size_bomb':
        # 64 MiB of zeros in a few KiB, in a frame the manifest says holds 1 MiB.
        zeros = bytes(64 << 20)
        files.append(plain('bomb.bin'))
        frames.append((1, zeros[:1 << 20], zstd(zeros), 1 << 20))
    elif case == 'short_frame':
        # A frame that holds fewer bytes than the manifest claims.
        files.append(plain('short.bin'))
        frames.append((1, hello, zstd(hello), len(hello) + 100))
    elif case != 'ok' and case != 'v2_schema':
        sys.exit('unknown case ' + case)
    out, manifest = forge(files, frames)
    if case == 'shared_frame':
        manifest['frames'][1]['offset'] = manifest['frames'][0]['offset']
    if case == 'v2_schema':
        manifest['schema'] = 'rkit.ckpt.v2'
    with open(path, 'wb') as f:
        f.write(finish(out, manifest))


if __name__ == '__main__':
    main()
