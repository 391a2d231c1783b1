#!/usr/bin/env bash
# Makes docs/images/tensorboard-scalars.png (Time Series: epoch_loss of the train and validation
# runs) and docs/images/tensorboard-graphs.png (Graphs: the train step, its $TB_GRAPH_FOCUS groups,
# default "net", opened).
# Runs examples/tensorboard_training into a temporary folder, serves those logs with TensorBoard on
# 127.0.0.1 and drives headless Chromium through its DevTools pipe (Python stdlib only) to set
# TensorBoard's settings, wait for the charts and pan/zoom the graph before each screenshot.
# Usage: bash scripts/tensorboard-screenshots.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tmp=$(mktemp -d)
trap '[ -z "${tb_pid:-}" ] || kill "$tb_pid" 2>/dev/null || true; rm -rf "$tmp"' EXIT
"$build/examples/tensorboard_training" "$tmp/logs" >/dev/null
python=$(bash scripts/python-env.sh | tail -n 1)
command -v chromium >/dev/null || $([ "$(id -u)" = 0 ] || echo sudo) \
  env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$python" -m tensorboard.main --logdir "$tmp/logs" --host 127.0.0.1 --port "$port" >"$tmp/tb.log" 2>&1 &
tb_pid=$!
for _ in $(seq 120); do
  curl -sf "http://127.0.0.1:$port/data/plugin/graphs/info" | grep -q run_graph && break || sleep 0.5
done
mkdir -p docs/images
"$python" - "$port" "$tmp/profile" "${TB_GRAPH_FOCUS:-net}" <<'EOF'
import atexit, base64, json, math, os, subprocess, sys, time
port, profile, focus = sys.argv[1:4]
base, session, last_id, pending = f"http://127.0.0.1:{port}/", None, 0, b""
(cmd_r, cmd_w), (out_r, out_w) = os.pipe(), os.pipe()  # Chromium reads fd 3 and writes fd 4
chromium = subprocess.Popen(["chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
    "--enable-unsafe-swiftshader", "--hide-scrollbars", "--remote-debugging-pipe", "--user-data-dir=" + profile],
    pass_fds=(3, 4), preexec_fn=lambda: (os.dup2(os.dup(cmd_r), 3), os.dup2(os.dup(out_w), 4)),
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
atexit.register(lambda: (chromium.terminate(), chromium.wait()))
os.close(cmd_r), os.close(out_w)
def call(method, **params):  # sends one command, returns its reply (messages end in a NUL byte)
    global last_id, pending
    last_id += 1
    command = {"id": last_id, "method": method, "params": params}
    os.write(cmd_w, json.dumps(command | ({"sessionId": session} if session else {})).encode() + b"\0")
    while True:
        while b"\0" not in pending:
            pending += os.read(out_r, 1 << 20) or sys.exit("chromium quit")
        message, pending = pending.split(b"\0", 1)
        reply = json.loads(message)
        if reply.get("id") == last_id:
            return reply["result"] if "result" in reply else sys.exit(f"{method}: {reply}")
def js(expression):  # evaluates in the page; all(selector) also looks inside shadow DOMs
    helper = "const all = (s, r = document) => [...r.querySelectorAll(s), ...[...r.querySelectorAll('*')]" \
             ".flatMap(e => e.shadowRoot ? all(s, e.shadowRoot) : [])];"
    reply = call("Runtime.evaluate", expression=helper + expression, returnByValue=True, replMode=True)
    return reply["result"].get("value") if "exceptionDetails" not in reply else sys.exit(f"{expression}: {reply}")
def shot(url, ready, width, height, path, before=lambda: None):
    call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
    call("Page.navigate", url=url)
    for _ in range(120):
        if js(ready): break
        time.sleep(0.5)
    else: sys.exit(f"timed out waiting for {url}")
    time.sleep(1.5), before(), time.sleep(1.5)
    with open(path, "wb") as f: f.write(base64.b64decode(call("Page.captureScreenshot", format="png")["data"]))
def zoom():  # drags the focus nodes to the middle, then zooms in (d3: 2^(-deltaY/500)) till they fill it
    (cx, cy), (sx, sy), k = js(
        f"const names = {json.dumps(focus.split())}, box = all('tf-graph-scene')[0].getBoundingClientRect();"
        " const rs = all('g.node').filter(n => names.includes(n.getAttribute('data-name')))"
        ".map(n => n.getBoundingClientRect()); if (!rs.length) rs.push(box);"
        " const lo = a => Math.min(...rs.map(r => r[a])), hi = a => Math.max(...rs.map(r => r[a]));"
        " [[(lo('left') + hi('right')) / 2, (lo('top') + hi('bottom')) / 2], [box.x + box.width / 2, box.y + box.height / 2],"
        " 0.9 * Math.min(box.width / (hi('right') - lo('left')), box.height / (hi('bottom') - lo('top')))]")
    mouse = lambda kind, x, y, **more: call("Input.dispatchMouseEvent", type=kind, x=x, y=y, **more)
    mouse("mousePressed", cx, cy, button="left", clickCount=1)
    for f in (0.5, 1): mouse("mouseMoved", cx + (sx - cx) * f, cy + (sy - cy) * f, button="left", buttons=1)
    mouse("mouseReleased", sx, sy, button="left", clickCount=1)
    time.sleep(0.5), mouse("mouseWheel", sx, sy, deltaX=0, deltaY=-500 * math.log2(min(max(k, 1), 3.5)))
def expand_then_zoom():  # double-clicks each focus group open (a layer per module), then zooms to them
    for name in focus.split():
        r = js(f"const n = all('g.node').find(n => n.getAttribute('data-name') === {json.dumps(name)});"
               " if (!n) null; else { const b = n.getBoundingClientRect(); [b.x + b.width / 2, b.y + b.height / 2]; }")
        if r:
            for kind in ("mousePressed", "mouseReleased"):
                call("Input.dispatchMouseEvent", type=kind, x=r[0], y=r[1], button="left", clickCount=2)
            time.sleep(2)
    zoom()
session = call("Target.attachToTarget", targetId=call("Target.createTarget", url="about:blank")["targetId"],
               flatten=True)["sessionId"]
call("Page.navigate", url=base + "data/runs")  # the app's origin, to reach its localStorage
js("localStorage.setItem('_tb_global_settings', JSON.stringify({ignoreOutliers: false, scalarSmoothing: 0,"
   " timeSeriesSettingsPaneOpened: false, stepSelectorEnabled: false, timeSeriesCardMinWidth: 700}))")
shot(base + "?tagFilter=%5Eepoch_loss%24&forceSVG=true#timeseries", "all('scalar-card line-chart svg path').length >= 2",
     1200, 520, "docs/images/tensorboard-scalars.png")
shot(base + "#graphs&run=train", "all('g.node').length >= 3", 1400, 900, "docs/images/tensorboard-graphs.png", expand_then_zoom)
EOF
ls -l docs/images/tensorboard-scalars.png docs/images/tensorboard-graphs.png
