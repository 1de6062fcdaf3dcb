#!/usr/bin/env bats
# rbench report: the HTML page of result files (fixtures and a real run), its charts as
# headless Chromium draws them, the table without --html, and bad input.
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  cd "$BATS_TEST_TMPDIR"
}

# Checks that the page is self-contained (nothing a browser would fetch, no script) and
# that every <svg> in it is well-formed XML on its own (an unescaped & or < in a label
# fails here), then prints how many charts of each kind it holds: "bars=3 roofline=1".
chart_kinds() {
  /usr/bin/python3 - "$1" <<'EOF'
import re, sys, xml.etree.ElementTree as ET
from html.parser import HTMLParser
page = open(sys.argv[1], encoding='utf-8').read()
assert page.startswith('<!DOCTYPE html>'), 'not an HTML page'
class Fetches(HTMLParser):   # every tag and attribute a browser could load or run something from
    def handle_starttag(self, tag, attrs):
        assert tag not in ('script', 'link', 'img', 'iframe', 'object', 'embed', 'base'), f'<{tag}> in the page'
        for name, value in attrs:
            assert name != 'src' and not name.startswith('on'), f'<{tag} {name}=...> in the page'
            assert name != 'href' or value.startswith('#'), f'<{tag} href="{value}"> leaves the page'
            assert 'url(' not in (value or ''), f'<{tag} {name}="{value}"> fetches something'
    def handle_data(self, data):
        if self.lasttag == 'style':
            assert 'url(' not in data and '@import' not in data, 'the style sheet fetches something'
Fetches().feed(page)
svgs = re.findall(r'<svg\b.*?</svg>', page, re.S)
assert len(svgs) == page.count('<svg'), 'an <svg> without its </svg>'
kinds = {}
for i, svg in enumerate(svgs):
    root = ET.fromstring(svg)   # raises on malformed XML
    assert root.tag == '{http://www.w3.org/2000/svg}svg', root.tag
    assert root.get('class') == 'chart', f'svg {i}: not a chart'
    assert len(root) > 5, f'svg {i}: next to nothing drawn'
    kinds[root.get('data-kind')] = kinds.get(root.get('data-kind'), 0) + 1
print(' '.join(f'{k}={kinds[k]}' for k in sorted(kinds)))
EOF
}

@test "report of the fixture with every kind of suite: bars per suite, two rooflines, two collective charts, tables" {
  run --separate-stderr rbench report "$FIXTURES/bench/report-mixed.jsonl" --html page.html
  assert_success
  assert_output ""
  [[ -z "$stderr" ]]
  run chart_kinds page.html
  assert_success
  # bars: cpu.stream cpu.gemm io.seq gpu.stream, gpu.gemm (TFLOP/s and %), gpu.copy gpu.nccl
  # comm.gloo; rooflines: CPU, GPU
  assert_output "bars=9 collective=2 roofline=2"
  # Every record is a row of the results table; the three that failed their check are red.
  [[ $(grep -c '^<tr' page.html) -eq $((94 + 1)) ]]   # + the one host
  [[ $(grep -c '^<tr class="wrong">' page.html) -eq 3 ]]
  grep -q 'fp16, bf16 peak 989.5 TFLOP/s' page.html      # one roof for equal peaks, in TFLOP/s
  grep -q 'fp32, own_sgemm peak 67 TFLOP/s' page.html
  grep -q 'intensity 1024 FLOP/byte' page.html            # fp16 at 4096 with its fp32 C: n/4
  grep -q '>d2d from=gpu0 to=gpu1 peer_access=true</text>' page.html   # bus ids and names restate the device
  grep -q 'device_names=8 × NVIDIA H100 80GB HBM3' page.html
  grep -q '3058 GB/s (gpu.stream triad)' page.html        # the GPU memory roof: the best triad
  grep -q 'sgemm peak 3072 GFLOP/s' page.html
  grep -q '197.3 GB/s (cpu.stream triad)' page.html      # the memory roof: the best triad
  grep -q 'FAKE CPU 2x16' page.html                       # the host table
  [[ $(grep -c 'class="note"' page.html) -eq 1 ]]         # only "2 results failed their own check"
}

@test "a subset of suites: charts for what the results have, a note for what they lack" {
  run rbench report "$FIXTURES/bench/base.jsonl" --html stream.html
  assert_success
  run chart_kinds stream.html
  assert_output "bars=1"
  grep -q 'No CPU roofline: it needs both cpu.stream (the memory roof) and cpu.gemm' stream.html
  grep -q 'No collective results' stream.html
  # cpu.gemm alone: no roofline either, for want of the memory roof.
  jq -c 'select(.suite == "cpu.gemm")' "$FIXTURES/bench/report-mixed.jsonl" > gemm.jsonl
  run rbench report gemm.jsonl --html gemm.html
  assert_success
  run chart_kinds gemm.html
  assert_output "bars=1"
  grep -q 'the results have only cpu.gemm' gemm.html
  # No peak in the records: the compute roof is the best measured rate, and says so.
  jq -c 'select(.suite == "cpu.gemm" or .suite == "cpu.stream") | .peak = null | .peak_fraction = null' \
    "$FIXTURES/bench/report-mixed.jsonl" > nopeak.jsonl
  run rbench report nopeak.jsonl --html nopeak.html
  run chart_kinds nopeak.html
  assert_output "bars=2 roofline=1"
  grep -q 'best measured: sgemm 2488 GFLOP/s' nopeak.html
}

@test "report of a real run: rbench run cpu io.seq --quick, then its page" {
  RKIT_BENCH_IO_BYTES=8M run --separate-stderr rbench run cpu io.seq --quick --reps 1 --warmup 0 -q -o real.jsonl
  assert_success
  run --separate-stderr rbench report real.jsonl --html real.html
  assert_success
  run chart_kinds real.html
  assert_success
  # A bar chart per suite run (cpu.gemm, cpu.stream, io.seq, ...), the CPU roofline.
  assert_output "bars=$(jq -s 'map(.suite) | unique | length' real.jsonl) roofline=1"
  grep -qE 'best measured: [sd]gemm [0-9.]+ GFLOP/s|[sd]gemm peak' real.html   # the compute roof, whichever it is
}

@test "without --html: the records as run prints them; --json passes them through; - reads stdin" {
  run --separate-stderr rbench report "$FIXTURES/bench/base.jsonl"
  assert_success
  assert_line --index 0 --regexp '^SUITE +METRIC +PARAMS +MEDIAN +UNIT +CV +PEAK +CHECK$'
  assert_line --regexp '^cpu\.stream +triad '
  [[ ${#lines[@]} -eq 5 ]]
  run --separate-stderr rbench report - --json < "$FIXTURES/bench/base.jsonl"
  assert_success
  diff <(jq -c . "$FIXTURES/bench/base.jsonl") <(echo "$output" | jq -c .)
  # Several files, one of them stdin, and the page on stdout: bars say which file.
  run --separate-stderr rbench report "$FIXTURES/bench/base.jsonl" - --html - < "$FIXTURES/bench/worse.jsonl"
  assert_success
  [[ "$output" == "<!DOCTYPE html>"* ]]
  [[ "$output" == *"triad [base.jsonl]"* && "$output" == *"triad [stdin]"* ]]
}

@test "text from the records is escaped: no markup gets through, the charts stay well-formed" {
  jq -c '.metric = "</svg><script>alert(1)</script>" | .host.hostname = "<b>h&\"o'"'"'st</b>" |
         .params.note = "a\u0001<b>" | .check = "</td><img src=x>"' "$FIXTURES/bench/base.jsonl" > evil.jsonl
  run rbench report evil.jsonl --html evil.html
  assert_success
  run chart_kinds evil.html      # also fails on <script, <img or src= anywhere in the page
  assert_success
  assert_output "bars=1"
  grep -q '&lt;/svg&gt;&lt;script&gt;alert(1)&lt;/script&gt;' evil.html
  grep -q '&lt;b&gt;h&amp;&quot;o&#39;st&lt;/b&gt;' evil.html
}

@test "bad input: missing 66, malformed or empty 65, unwritable output 74, usage 64; one line each, no file left" {
  run --separate-stderr rbench report missing.jsonl --html out.html
  assert_failure 66
  assert_one_line_stderr
  [[ "$stderr" == *"missing.jsonl"* ]]
  printf 'not json\n' > bad.jsonl
  run --separate-stderr rbench report bad.jsonl --html out.html
  assert_failure 65
  assert_one_line_stderr
  [[ "$stderr" == *"bad.jsonl:1"* ]]
  jq -c '.schema = "rkit.bench.v9"' "$FIXTURES/bench/base.jsonl" > newer.jsonl
  run --separate-stderr rbench report newer.jsonl
  assert_failure 65
  assert_one_line_stderr
  : > empty.jsonl
  run --separate-stderr rbench report empty.jsonl --html out.html
  assert_failure 65
  assert_one_line_stderr
  [[ "$stderr" == *"no rkit.bench.v1 records"* ]]
  run --separate-stderr rbench report "$FIXTURES/bench/base.jsonl" --html /nonexistent/dir/out.html
  assert_failure 74
  assert_one_line_stderr
  [[ "$stderr" == *"cannot write the report to /nonexistent/dir/out.html"* ]]
  run --separate-stderr rbench report "$FIXTURES/bench/base.jsonl" --html /proc/rbench-report.html   # unwritable, even for root
  assert_failure 74
  assert_one_line_stderr
  mkdir adir
  run --separate-stderr rbench report "$FIXTURES/bench/base.jsonl" --html adir
  assert_failure 74
  assert_one_line_stderr
  [[ "$stderr" == *"it is a directory"* ]]
  run --separate-stderr rbench report "$FIXTURES/bench/base.jsonl" --html nodir/
  assert_failure 74
  assert_one_line_stderr
  cp "$FIXTURES/bench/base.jsonl" mine.jsonl
  run --separate-stderr rbench report mine.jsonl --html mine.jsonl
  assert_failure 64
  assert_one_line_stderr
  cmp mine.jsonl "$FIXTURES/bench/base.jsonl"        # the results were not overwritten
  run --separate-stderr rbench report - - --html out.html
  assert_failure 64
  run --separate-stderr rbench report --html out.html
  assert_failure 64
  assert_file_not_exist out.html
  [[ -z "$(ls -A adir)" ]]
  [[ -z "$(find . -name '.*.tmp.*')" ]]               # no temporary left by a failed run
}


@test "the page renders in headless Chromium with every chart visible" {
  command -v chromium || { echo "chromium is not installed: packaging/install-deps.sh installs it (tests group)"; return 1; }
  rbench report "$FIXTURES/bench/report-mixed.jsonl" --html page.html
  run chart_kinds page.html      # well-formed, self-contained
  assert_output "bars=9 collective=2 roofline=2"
  # 1. Where the browser lays each chart out (helpers.bash, chart_boxes).
  chart_boxes page.html >boxes.json || { cat chromium.log; return 1; }
  jq -e '.charts | length == 13 and all(.w > 500 and .h > 100)' boxes.json
  # 2. A screenshot of the page itself, tall enough for every chart.
  height=$(jq '[.charts[] | .y + .h] | max | ceil + 20' boxes.json)
  chromium_run --window-size=1000,"$height" --screenshot="$PWD/page.png" "file://$PWD/page.html" || { cat chromium.log; return 1; }
  # 3. Each chart's box in the screenshot holds its colours: bars (blue, or red when
  #    wrong), the roofline's memory (green) and compute (purple) roofs and its points,
  #    the collectives' lines. A broken chart draws nothing there and fails.
  /usr/bin/python3 - page.png boxes.json <<'EOF'
import json, struct, sys, zlib
import numpy as np

def read_png(path):
    data = open(path, 'rb').read()
    assert data[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG'
    pos, idat = 8, []
    while pos < len(data):
        n, kind = struct.unpack('>I4s', data[pos:pos + 8])
        if kind == b'IHDR':
            w, h, depth, ctype, _, _, interlace = struct.unpack('>IIBBBBB', data[pos + 8:pos + 21])
        elif kind == b'IDAT':
            idat.append(data[pos + 8:pos + 8 + n])
        pos += 12 + n
    assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
    bpp = 3 if ctype == 2 else 4
    stride = w * bpp
    raw = zlib.decompress(b''.join(idat))
    img = np.zeros((h, stride), np.uint8)
    prev = np.zeros(stride, np.int32)
    for y in range(h):   # undo the PNG filters, row by row
        f, line = raw[y * (stride + 1)], np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int32)
        if f == 0: cur = line
        elif f == 1: cur = np.cumsum(line.reshape(w, bpp), axis=0).reshape(-1) & 255
        elif f == 2: cur = (line + prev) & 255
        else:        # average and Paeth depend on the pixel just decoded: one byte at a time
            out, l, p = bytearray(stride), line.tolist(), prev.tolist()
            for i in range(stride):
                a = out[i - bpp] if i >= bpp else 0
                if f == 3:
                    out[i] = (l[i] + ((a + p[i]) >> 1)) & 255
                else:
                    b, c = p[i], (p[i - bpp] if i >= bpp else 0)
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    out[i] = (l[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            cur = np.frombuffer(bytes(out), np.uint8).astype(np.int32)
        img[y], prev = cur, cur
    return img.reshape(h, w, bpp)[:, :, :3].astype(np.int32)

def count(region, hex_colour, tolerance=12):
    rgb = [int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]
    return int((np.abs(region - rgb).max(axis=2) <= tolerance).sum())

img = read_png(sys.argv[1])
boxes = json.load(open(sys.argv[2]))['charts']
bar, wrong, memory, compute = '#4e79a7', '#d62728', '#59a14f', '#7a3b8f'
palette = ['#4e79a7', '#f28e2b', '#59a14f', '#b07aa1']
failures = []
for i, b in enumerate(boxes):
    x0, y0, x1, y1 = int(b['x']) + 2, int(b['y']) + 2, int(b['x'] + b['w']) - 2, int(b['y'] + b['h']) - 2
    assert y1 <= img.shape[0] and x1 <= img.shape[1], f'chart {i} is outside the screenshot'
    region = img[y0:y1, x0:x1]
    if b['kind'] == 'bars':
        seen = {'bars (blue or red)': count(region, bar) + count(region, wrong)}
        need = 1500
    elif b['kind'] == 'roofline':
        seen = {'memory roof': count(region, memory), 'compute roof': count(region, compute),
                'points': count(region, palette[0]) + count(region, palette[1])}
        need = 150
    else:
        seen = {'lines': sum(count(region, c) for c in palette)}
        need = 800
    print(f"chart {i} ({b['kind']}, {b['w']:.0f}x{b['h']:.0f} at y={b['y']:.0f}): {seen}")
    failures += [f'chart {i} ({b["kind"]}): {k}: {v} pixels, fewer than {need}' for k, v in seen.items() if v < need]
assert not failures, failures
EOF
  # Nothing of Chromium's is left: no process with this test's profile, no profile dir.
  [[ -z "$(pgrep -f -- "$BATS_TEST_TMPDIR/chromium" || true)" ]]
  [[ -z "$(ls -d "$BATS_TEST_TMPDIR"/chromium.*/ 2>/dev/null || true)" ]]
}
