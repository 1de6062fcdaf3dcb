#!/usr/bin/env bats
# rcost report --format focus and --format html end to end: the FOCUS CSV adds up to the
# report to the cent, and the HTML page is self-contained, well-formed, and draws every
# chart in headless Chromium (as tests/cli/rbench_report.bats checks rbench's page).
bats_require_minimum_version 1.5.0

setup() {
  load helpers
  cd "$BATS_TEST_TMPDIR"
  CHECK=$BATS_TEST_DIRNAME/rcost_check.py
  PRICES=$FIXTURES/rcost/prices.toml
  T0=1793491200        # 2026-11-01T00:00:00Z
  T1=$((T0 + 129600))  # 2026-11-02T12:00:00Z: the running job crosses midnight
  python3 "$CHECK" samples --host n1 --start $((T0 - 1800)) --end $((T0 + 9000)) --interval 60 --gpus 2 --cpus 4 \
    --gpu-name "NVIDIA H200 NVL" >samples.jsonl
  python3 "$CHECK" samples --host n3 --start $((T0 + 80000)) --end $((T0 + 100000)) --interval 300 --gpus 4 --cpus 8 \
    --gpu-name "NVIDIA H200" --seed 3 >>samples.jsonl
  INPUTS=("$FIXTURES/rcost/synthetic.jsonl" samples.jsonl)
}

@test "focus: the rows add up to the report's total to the cent, whichever way idle capacity is shared" {
  for share in weighted even none; do
    run --separate-stderr rcost --prices "$PRICES" report --since "@$T0" --until "@$T1" --share-idle $share \
      --format focus "${INPUTS[@]}"
    assert_success
    [[ -z $stderr ]]
    echo "$output" >focus.csv
    rcost --prices "$PRICES" report --since "@$T0" --until "@$T1" --share-idle $share --json "${INPUTS[@]}" >report.jsonl
    run /usr/bin/python3 - focus.csv report.jsonl <<'EOF'
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1], newline='')))
summary = [json.loads(l) for l in open(sys.argv[2])][-1]
total = summary['total']
usage = [r for r in rows if r['x_ChargeKind'] == 'usage']
idle = [r for r in rows if r['x_ChargeKind'] == 'idle']
billed = lambda rs: sum(float(r['BilledCost']) for r in rs)
assert abs(billed(usage) - total['cost']) < 0.005, (billed(usage), total['cost'])
assert abs(sum(float(r['ListCost']) for r in usage) - total['list_cost']) < 0.005
assert abs(billed(rows) - total['total_cost']) < 0.005, (billed(rows), total['total_cost'])
assert idle and {r['ResourceId'] for r in idle} == {'n1', 'n3'}, {r['ResourceId'] for r in idle}
assert all(r['SubAccountName'] == '' for r in idle)
for r in rows:   # one UTC day per row, inside the window
    s, e = r['ChargePeriodStart'], r['ChargePeriodEnd']
    assert s < e and (s[:10] == e[:10] or e[11:] == '00:00:00Z'), (s, e)
    assert '2026-11-01T00:00:00Z' <= s and e <= '2026-11-02T12:00:00Z', (s, e)
    assert r['PricingCategory'] == ('Dynamic' if r['RegionId'] == 'cloud-spot' else 'Standard'), r['RegionId']
    assert r['ChargeCategory'] == 'Usage' and r['ChargeClass'] == '' and float(r['ConsumedQuantity']) > 0
    json.loads(r['Tags'])
print(len(usage), 'usage rows,', len(idle), 'idle rows')
EOF
    echo "$output"
    assert_success
  done
}

# Checks that the page is self-contained (nothing a browser would fetch, no script) and
# that every <svg> in it is well-formed XML on its own, then prints how many charts of
# each kind it holds, as rbench_report.bats's helper of the same name.
chart_kinds() {
  /usr/bin/python3 - "$1" <<'EOF'
import re, sys, xml.etree.ElementTree as ET
from html.parser import HTMLParser
page = open(sys.argv[1], encoding='utf-8').read()
assert page.startswith('<!DOCTYPE html>'), 'not an HTML page'
class Fetches(HTMLParser):
    def handle_starttag(self, tag, attrs):
        assert tag not in ('script', 'link', 'img', 'iframe', 'object', 'embed', 'base'), f'<{tag}> in the page'
        for name, value in attrs:
            assert name != 'src' and not name.startswith('on'), f'<{tag} {name}=...> in the page'
            assert name != 'href' or value.startswith('#'), f'<{tag} href="{value}"> leaves the page'
            assert 'url(' not in (value or ''), f'<{tag} {name}="{value}"> fetches something'
Fetches().feed(page)
svgs = re.findall(r'<svg\b.*?</svg>', page, re.S)
assert len(svgs) == page.count('<svg'), 'an <svg> without its </svg>'
kinds = {}
for i, svg in enumerate(svgs):
    root = ET.fromstring(svg)
    assert root.get('class') == 'chart', f'svg {i}: not a chart'
    ns = '{http://www.w3.org/2000/svg}'
    assert len(root.findall(f'.//{ns}rect')) > 3 and root.findall(f'.//{ns}title'), f'svg {i}: no bars with tooltips'
    kinds[root.get('data-kind')] = kinds.get(root.get('data-kind'), 0) + 1
print(' '.join(f'{k}={kinds[k]}' for k in sorted(kinds)))
EOF
}

@test "html: one self-contained page with cost over time, utilisation, waste and the tenant table" {
  run --separate-stderr rcost --prices "$PRICES" report --since "@$T0" --until "@$T1" --format html "${INPUTS[@]}"
  assert_success
  [[ -z $stderr ]]
  echo "$output" >page.html
  run chart_kinds page.html
  assert_output "cost-by-tenant=1 utilisation=2 waste=1"
  grep -q '<td>alpha</td>' page.html
  grep -q '2026-11-01T00:00:00Z to 2026-11-02T12:00:00Z' page.html
  # Without samples: the cost chart, and a sentence for the others.
  rcost --prices "$PRICES" report --since "@$T0" --until "@$T1" --format html "$FIXTURES/rcost/synthetic.jsonl" >jobs.html
  run chart_kinds jobs.html
  assert_output "cost-by-tenant=1"
  grep -q 'No utilisation samples were given' jobs.html
}


@test "html: the page renders in headless Chromium with the bars of every chart visible" {
  command -v chromium || { echo "chromium is not installed: packaging/install-deps.sh installs it (tests group)"; return 1; }
  rcost --prices "$PRICES" report --since "@$T0" --until "@$T1" --format html "${INPUTS[@]}" >page.html
  # Where the browser lays each chart out (helpers.bash, chart_boxes).
  chart_boxes page.html >boxes.json || { cat chromium.log; return 1; }
  jq -e '.charts | length == 4 and all(.w > 500 and .h > 80)' boxes.json
  height=$(jq '[.charts[] | .y + .h] | max | ceil + 20' boxes.json)
  chromium_run --window-size=1000,"$height" --screenshot="$PWD/page.png" "file://$PWD/page.html" || { cat chromium.log; return 1; }
  # Each chart's box holds its bars' colours: tenants' (the palette's first), used and
  # allocated idle (green, orange), idle GPU-hours and waste (orange, brown).
  /usr/bin/python3 - page.png boxes.json <<'EOF'
import json, struct, sys, zlib
import numpy as np

def read_png(path):   # 8-bit RGB(A), not interlaced: what Chromium writes
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
    for y in range(h):
        f, line = raw[y * (stride + 1)], np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int32)
        if f == 0: cur = line
        elif f == 1: cur = np.cumsum(line.reshape(w, bpp), axis=0).reshape(-1) & 255
        elif f == 2: cur = (line + prev) & 255
        else:
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
need = {'cost-by-tenant': ['#4e79a7'], 'utilisation': ['#59a14f', '#f28e2b'], 'waste': ['#f28e2b', '#9c755f']}
failures = []
for i, b in enumerate(boxes):
    x0, y0, x1, y1 = int(b['x']) + 2, int(b['y']) + 2, int(b['x'] + b['w']) - 2, int(b['y'] + b['h']) - 2
    assert y1 <= img.shape[0] and x1 <= img.shape[1], f'chart {i} is outside the screenshot'
    seen = {c: count(img[y0:y1, x0:x1], c) for c in need[b['kind']]}
    print(f"chart {i} ({b['kind']}): {seen}")
    failures += [f'chart {i} ({b["kind"]}): {c}: {n} pixels' for c, n in seen.items() if n < 150]
assert not failures, failures
EOF
  [[ -z "$(pgrep -f -- "$BATS_TEST_TMPDIR/chromium" || true)" ]]
}
