//! Metrics endpoints and the dashboard against a real running monitor: `/metrics` checked with
//! a real Prometheus parser (python `prometheus_client`), `icicle top` in a real terminal under
//! tmux read back with capture-pane, and log lines when there is no terminal.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use icicle_testkit::lustre::{Kind, Workload};

/// A Lustre monitor on the stand-in serving metrics on a free port; returns it, its address,
/// and the number of changelog records it will read.
fn running_monitor(tmp: &Path) -> (Child, String, usize) {
    running_monitor_limited(tmp, None)
}

/// [`running_monitor`] with at most `open_files` descriptors (`ulimit -n`).
fn running_monitor_limited(tmp: &Path, open_files: Option<u64>) -> (Child, String, usize) {
    let root = tmp.join("fs");
    let journal = tmp.join("lfs/changelog");
    let mut w = Workload::open(&root, &journal, 3).unwrap();
    w.preexisting(30).unwrap();
    w.run(Kind::Mixed, 200, "/work").unwrap();
    drop(w);
    let indexes = common::journal_indexes(&journal);
    let (records, last) = (indexes.len(), *indexes.last().unwrap());
    let testkit = Path::new(env!("CARGO_BIN_EXE_icicle")).with_file_name("icicle-testkit");
    let cfg = common::config(
        tmp,
        "m.toml",
        &format!(
            "[records]\nvisible_to = [\"public\"]\n[sources.mdt0]\ntype = \"lustre\"\nmdt = \"fs0-MDT0000\"\nlfs = [\"{k}\", \"lfs\", \"--journal\", \"{j}\", \"--mount\", \"{r}\", \"--delay-ms\", \"0\"]\n\
             mount = \"{r}\"\nfsname = \"fs0\"\nbatch_size = 100\nquiet_period_secs = 0.0\npoll_interval_secs = 0.1\nstate_dir = \"{t}/state\"\n[sinks.o]\ntype = \"file\"\ndir = \"{t}/out\"\n",
            k = testkit.display(),
            j = journal.display(),
            r = root.display(),
            t = tmp.display()
        ),
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_icicle"));
    cmd.args(["monitor", "-c", cfg.to_str().unwrap(), "--metrics-addr", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(n) = open_files {
        use std::os::unix::process::CommandExt;
        // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit { rlim_cur: n, rlim_max: n };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "the monitor ended before serving metrics");
        if let Some(rest) = line.trim().strip_prefix("metrics on http://") {
            break rest.split('/').next().unwrap().to_string();
        }
    };
    // Keep draining its stderr so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in err.lines() {});
    // Wait until everything was read and acknowledged.
    let t = Instant::now();
    loop {
        if let Ok(s) = icicle_tui::dashboard::fetch_status(&addr) {
            if s.get("icicle_changelog_cleared", &[("component", "mdt0"), ("mdt", "fs0-MDT0000")]) == Some(last as f64)
            {
                break;
            }
        }
        assert!(t.elapsed() < Duration::from_secs(120), "the monitor never caught up");
        std::thread::sleep(Duration::from_millis(100));
    }
    (child, addr, records)
}

fn http_get(addr: &str, path: &str) -> String {
    http_request(addr, "GET", path)
}

fn http_request(addr: &str, method: &str, path: &str) -> String {
    http_request_with(addr, method, path, "")
}

fn http_request_with(addr: &str, method: &str, path: &str, headers: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}Connection: close\r\nContent-Length: 0\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    r
}

#[test]
fn metrics_are_valid_prometheus_text_and_match_the_status_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut child, addr, records) = running_monitor(tmp.path());
    let resp = http_get(&addr, "/metrics");
    assert!(
        resp.starts_with("HTTP/1.1 200 OK\r\n") && resp.contains("Content-Type: text/plain; version=0.0.4"),
        "{resp}"
    );
    let body = resp.split("\r\n\r\n").nth(1).unwrap().to_string();
    let body_file = tmp.path().join("metrics.txt");
    std::fs::write(&body_file, &body).unwrap();
    // The reference parsers: every family and sample as JSON.
    let parse = |module: &str, file: &std::path::Path, body: &str| -> serde_json::Value {
        let py = format!(
            "import json,sys\nfrom prometheus_client.{module} import text_string_to_metric_families as p\n\
             fams=[{{'name':f.name,'type':f.type,'samples':[[s.name,s.labels,s.value] for s in f.samples]}} for f in p(open(sys.argv[1]).read())]\n\
             print(json.dumps(fams))"
        );
        let out = Command::new(common::python()).args(["-c", &py, file.to_str().unwrap()]).output().unwrap();
        assert!(
            out.status.success(),
            "prometheus_client.{module} rejected /metrics: {}\n{body}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let fams = parse("parser", &body_file, &body);
    // A scraper that asks for OpenMetrics gets it, and the strict OpenMetrics parser reads the
    // same families.
    let resp = http_request_with(
        &addr,
        "GET",
        "/metrics",
        "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n",
    );
    assert!(resp.contains("Content-Type: application/openmetrics-text; version=1.0.0"), "{resp}");
    let om_body = resp.split("\r\n\r\n").nth(1).unwrap().to_string();
    assert!(om_body.ends_with("# EOF\n"), "{om_body}");
    let om_file = tmp.path().join("openmetrics.txt");
    std::fs::write(&om_file, &om_body).unwrap();
    let om = parse("openmetrics.parser", &om_file, &om_body);
    let family_names = |v: &serde_json::Value| {
        let mut n: Vec<(String, String)> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f["name"].as_str().unwrap().to_string(), f["type"].as_str().unwrap().to_string()))
            .collect();
        n.sort();
        n
    };
    assert_eq!(family_names(&fams), family_names(&om));
    let names: Vec<&str> = fams.as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    for want in [
        "icicle_records_in",
        "icicle_records_out",
        "icicle_reduce",
        "icicle_batches",
        "icicle_state_entries",
        "icicle_changelog_lag",
        "icicle_sink_batches",
        "icicle_process_resident_bytes",
        "icicle_process_cpu_seconds",
        "icicle_process_open_fds",
        "icicle_process_start_time_seconds",
        "icicle_build_info",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    // Prometheus naming over every family: `_total` only on counters, units as suffixes, no
    // precomputed rates.
    for f in fams.as_array().unwrap() {
        let (name, ty) = (f["name"].as_str().unwrap(), f["type"].as_str().unwrap());
        assert!(!name.ends_with("_total"), "{name}: a {ty} named _total");
        assert!(!name.ends_with("_rate"), "{name}: a precomputed rate");
        for unit in ["seconds", "bytes"] {
            assert!(!name.contains(unit) || name.ends_with(unit), "{name}: the unit is not the suffix");
        }
        for s in f["samples"].as_array().unwrap() {
            let sample = s[0].as_str().unwrap();
            match ty {
                "counter" => assert!(
                    sample == format!("{name}_total") || sample == format!("{name}_created"),
                    "{sample} of counter {name}"
                ),
                "histogram" => {
                    assert!(
                        ["_bucket", "_sum", "_count", "_created"].iter().any(|x| sample == format!("{name}{x}")),
                        "{sample} of histogram {name}"
                    )
                }
                _ => assert_eq!(sample, name),
            }
        }
    }
    // Error series are there from the start, at 0.
    let zero = |fam: &str, labels: serde_json::Value| {
        let f = fams.as_array().unwrap().iter().find(|f| f["name"] == fam).unwrap_or_else(|| panic!("{fam} missing"));
        assert!(
            f["samples"].as_array().unwrap().iter().any(|s| s[1] == labels && s[2] == 0.0),
            "{fam} {labels} not 0: {f}"
        );
    };
    zero("icicle_sink_errors", serde_json::json!({"sink": "o", "kind": "ingest"}));
    zero("icicle_sink_errors", serde_json::json!({"sink": "o", "kind": "delete"}));
    zero("icicle_rejects", serde_json::json!({"component": "mdt0"}));
    zero("icicle_dead_letters", serde_json::json!({"source": "mdt0"}));
    // Latency histograms: a batch's, a delivery's and fid2path's.
    for h in
        ["icicle_batch_duration_seconds", "icicle_sink_delivery_duration_seconds", "icicle_fid2path_duration_seconds"]
    {
        let f = fams
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == h)
            .unwrap_or_else(|| panic!("{h} missing from {names:?}"));
        assert_eq!(f["type"], "histogram", "{f}");
    }
    let hist_count = |fam: &str, labels: serde_json::Value| -> f64 {
        let f = fams.as_array().unwrap().iter().find(|f| f["name"] == fam).unwrap();
        f["samples"].as_array().unwrap().iter().find(|s| s[0] == format!("{fam}_count") && s[1] == labels).unwrap()[2]
            .as_f64()
            .unwrap()
    };
    let sample = |fam: &str, labels: serde_json::Value| -> f64 {
        fams.as_array().unwrap().iter().find(|f| f["name"] == fam).unwrap()["samples"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s[1] == labels)
            .unwrap()[2]
            .as_f64()
            .unwrap()
    };
    assert_eq!(sample("icicle_records_in", serde_json::json!({"component": "mdt0"})), records as f64);
    // Every batch was observed once.
    assert_eq!(
        hist_count("icicle_batch_duration_seconds", serde_json::json!({"component": "mdt0"})),
        sample("icicle_batches", serde_json::json!({"component": "mdt0"}))
    );
    assert_eq!(sample("icicle_changelog_lag", serde_json::json!({"component": "mdt0", "mdt": "fs0-MDT0000"})), 0.0);
    let status = icicle_tui::dashboard::fetch_status(&addr).unwrap();
    assert_eq!(status.get("icicle_records_in_total", &[("component", "mdt0")]), Some(records as f64));
    assert!(http_get(&addr, "/nope").starts_with("HTTP/1.1 404"));
    // A query string changes nothing; only GET (and HEAD) read the endpoints.
    assert!(http_get(&addr, "/metrics?x=1").starts_with("HTTP/1.1 200 OK"));
    for method in ["POST", "DELETE", "PUT"] {
        let r = http_request(&addr, method, "/metrics");
        assert!(r.starts_with("HTTP/1.1 405") && r.contains("Allow: GET, HEAD"), "{method}: {r}");
    }
    child.kill().unwrap();
    let _ = child.wait();
}

fn tmux(sock: &str, args: &[&str]) -> std::process::Output {
    Command::new("tmux").arg("-L").arg(sock).args(args).output().unwrap()
}

fn wait_for_screen(sock: &str, want: &str) -> String {
    let t = Instant::now();
    loop {
        let screen = String::from_utf8_lossy(&tmux(sock, &["capture-pane", "-p", "-t", "top"]).stdout).into_owned();
        if screen.contains(want) {
            return screen;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "`{want}` never appeared:\n{screen}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn icicle_top_in_a_real_terminal_shows_the_running_monitor() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut child, addr, records) = running_monitor(tmp.path());
    let sock = format!("icicle-test-{}", std::process::id());
    let top = format!("{} top --connect {addr} --interval 0.3", env!("CARGO_BIN_EXE_icicle"));
    let st = tmux(&sock, &["new-session", "-d", "-s", "top", "-x", "140", "-y", "40", &top]);
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    let screen = wait_for_screen(&sock, "records in");
    assert!(screen.contains(&format!("icicle top — {addr}")), "{screen}");
    let shown = icicle_tui::dashboard::human(records as f64);
    assert!(
        screen.lines().any(|l| l.contains("records in") && l.contains(&shown)),
        "{records} records as `{shown}`:\n{screen}"
    );
    tmux(&sock, &["send-keys", "-t", "top", "2"]);
    let screen = wait_for_screen(&sock, "MDT fs0-MDT0000");
    // The source's row shows where it is in the changelog: the last index, read and cleared.
    let last = *common::journal_indexes(&tmp.path().join("lfs/changelog")).last().unwrap();
    let position = icicle_tui::dashboard::human(last as f64);
    assert!(
        screen.lines().any(|l| l.contains("MDT fs0-MDT0000") && l.contains(&position)),
        "{position}:
{screen}"
    );
    tmux(&sock, &["send-keys", "-t", "top", "4"]);
    wait_for_screen(&sock, "acknowledged deliveries");
    tmux(&sock, &["send-keys", "-t", "top", "?"]);
    wait_for_screen(&sock, "pause / resume updates");
    // Esc closes the help, q quits and the terminal is given back (the session ends).
    tmux(&sock, &["send-keys", "-t", "top", "Escape"]);
    std::thread::sleep(Duration::from_millis(500));
    tmux(&sock, &["send-keys", "-t", "top", "q"]);
    let t = Instant::now();
    while tmux(&sock, &["has-session", "-t", "top"]).status.success() {
        assert!(t.elapsed() < Duration::from_secs(10), "q did not quit");
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = tmux(&sock, &["kill-server"]);
    child.kill().unwrap();
    let _ = child.wait();
}

#[test]
fn a_terminated_dashboard_gives_the_terminal_back() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut child, addr, _) = running_monitor(tmp.path());
    let sock = format!("icicle-term-{}", std::process::id());
    let pidfile = tmp.path().join("top.pid");
    // The shell records the dashboard's pid, waits for it, then prints on the normal screen.
    let cmd = format!(
        "{} top --connect {addr} & echo $! > {}; wait; echo TERMINAL-BACK; sleep 30",
        env!("CARGO_BIN_EXE_icicle"),
        pidfile.display()
    );
    let st = tmux(&sock, &["new-session", "-d", "-s", "top", "-x", "120", "-y", "30", &cmd]);
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    wait_for_screen(&sock, "records in");
    let pid: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    // SAFETY: kill sends a signal; the pid is the dashboard the test's shell started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let screen = wait_for_screen(&sock, "TERMINAL-BACK");
    // Back on the normal screen: the dashboard's frame is gone.
    assert!(!screen.contains("icicle top —"), "{screen}");
    let _ = tmux(&sock, &["kill-server"]);
    child.kill().unwrap();
    let _ = child.wait();
}

#[test]
fn without_a_terminal_the_dashboard_writes_log_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut child, addr, records) = running_monitor(tmp.path());
    let mut top = Command::new(env!("CARGO_BIN_EXE_icicle"))
        .args(["top", "--connect", &addr, "--interval", "0.2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(top.stderr.take().unwrap());
    let mut line = String::new();
    let want = format!("status: in {}", icicle_tui::dashboard::human(records as f64));
    let t = Instant::now();
    loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "no log line");
        if line.starts_with(&want) {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{line}");
    }
    assert!(line.contains("changelog lag 0"), "{line}");
    top.kill().unwrap();
    let _ = top.wait();
    child.kill().unwrap();
    let _ = child.wait();
}

/// Wait for process `pid` to end (a liveness bound, not a speed check); returns how long it took.
fn wait_gone(pid: i32, what: &str) -> Duration {
    let t = Instant::now();
    // SAFETY: signal 0 only asks whether the process exists.
    while unsafe { libc::kill(pid, 0) } == 0
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ")
    {
        assert!(t.elapsed() < Duration::from_secs(60), "{what} still runs a minute after its terminal went away");
        std::thread::sleep(Duration::from_millis(20));
    }
    t.elapsed()
}

/// A shell in a tmux pane that ignores the hangup itself, runs `cmd` with stderr to `err`
/// and records `cmd`'s pid and exit code beside it.
fn in_pane_recording_exit(tmp: &Path, cmd: &str, err: &Path) -> (String, std::path::PathBuf, std::path::PathBuf) {
    let (pid, code) = (tmp.join("pane.pid"), tmp.join("pane.code"));
    let script = tmp.join("pane.sh");
    std::fs::write(
        &script,
        format!(
            "trap '' HUP\n{cmd} 2>{e} &\necho $! > {p}\nwait $!\necho $? > {c}\n",
            e = err.display(),
            p = pid.display(),
            c = code.display()
        ),
    )
    .unwrap();
    (format!("sh {}", script.display()), pid, code)
}

fn read_number(file: &Path) -> i32 {
    let t = Instant::now();
    loop {
        if let Ok(Ok(n)) = std::fs::read_to_string(file).map(|s| s.trim().parse::<i32>()) {
            return n;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "no number in {}", file.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn icicle_top_ends_when_its_terminal_goes_away() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut child, addr, _) = running_monitor(tmp.path());
    let sock = format!("icicle-lost-{}", std::process::id());
    let err = tmp.path().join("top.err");
    // `</dev/tty`: a background job of a script reads /dev/null otherwise.
    let top = format!("{} top --connect {addr} --interval 0.2 </dev/tty", env!("CARGO_BIN_EXE_icicle"));
    let (pane, pid_file, code_file) = in_pane_recording_exit(tmp.path(), &top, &err);
    assert!(tmux(&sock, &["new-session", "-d", "-s", "top", "-x", "120", "-y", "30", &pane]).status.success());
    wait_for_screen(&sock, "records in");
    let pid = read_number(&pid_file);
    let cpu_before = cpu_ticks(pid);
    // The server goes and takes the terminal with it (as when an SSH session drops).
    tmux(&sock, &["kill-server"]);
    let took = wait_gone(pid, "icicle top");
    eprintln!("icicle top ended {} ms after its terminal went away (CPU ticks before: {cpu_before})", took.as_millis());
    assert_eq!(read_number(&code_file), 0, "{}", std::fs::read_to_string(&err).unwrap_or_default());
    let err = std::fs::read_to_string(&err).unwrap();
    assert!(!err.contains("panicked"), "{err}");
    child.kill().unwrap();
    let _ = child.wait();
}

/// CPU time (user + system ticks) of process `pid` so far.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    f.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
}

#[test]
fn a_monitor_with_a_dashboard_stops_cleanly_when_its_terminal_goes_away() {
    monitor_with_dashboard_stops_cleanly(false);
}

#[test]
fn a_monitor_with_a_dashboard_stops_cleanly_on_sigterm() {
    monitor_with_dashboard_stops_cleanly(true);
}

/// A `monitor --tui` in tmux, stopped by SIGTERM (`sigterm`) or by its terminal going away:
/// it exits 0 after delivering, checkpointing and acknowledging what it read.
fn monitor_with_dashboard_stops_cleanly(sigterm: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fs");
    let journal = tmp.path().join("lfs/changelog");
    let mut w = Workload::open(&root, &journal, 5).unwrap();
    w.preexisting(30).unwrap();
    w.run(Kind::Mixed, 300, "/work").unwrap();
    drop(w);
    let records = common::journal_indexes(&journal).len();
    let testkit = Path::new(env!("CARGO_BIN_EXE_icicle")).with_file_name("icicle-testkit");
    let cfg = common::config(
        tmp.path(),
        "m.toml",
        &format!(
            "[records]\nvisible_to = [\"public\"]\n[sources.mdt0]\ntype = \"lustre\"\nmdt = \"fs0-MDT0000\"\nlfs = [\"{k}\", \"lfs\", \"--journal\", \"{j}\", \"--mount\", \"{r}\", \"--delay-ms\", \"0\"]\n\
             mount = \"{r}\"\nfsname = \"fs0\"\nbatch_size = 50\nquiet_period_secs = 0.0\npoll_interval_secs = 0.1\nstate_dir = \"{t}/state\"\n[sinks.o]\ntype = \"file\"\ndir = \"{t}/out\"\n",
            k = testkit.display(),
            j = journal.display(),
            r = root.display(),
            t = tmp.path().display()
        ),
    );
    let sock = format!("icicle-lost-tui-{}-{sigterm}", std::process::id());
    let err = tmp.path().join("monitor.err");
    let monitor = format!("{} monitor --tui -c {} </dev/tty", env!("CARGO_BIN_EXE_icicle"), cfg.display());
    let (pane, pid_file, code_file) = in_pane_recording_exit(tmp.path(), &monitor, &err);
    assert!(tmux(&sock, &["new-session", "-d", "-s", "top", "-x", "120", "-y", "30", &pane]).status.success());
    wait_for_screen(&sock, "records in");
    let pid = read_number(&pid_file);
    if sigterm {
        // SAFETY: plain kill(2) of the child's pid.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    } else {
        tmux(&sock, &["kill-server"]);
    }
    let took = wait_gone(pid, "icicle monitor --tui");
    eprintln!(
        "the monitor ended {} ms after {}",
        took.as_millis(),
        if sigterm { "SIGTERM" } else { "its terminal went away" }
    );
    let _ = tmux(&sock, &["kill-server"]);
    let err = std::fs::read_to_string(&err).unwrap();
    assert_eq!(read_number(&code_file), 0, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // It stopped as on SIGTERM: what it read was delivered, checkpointed and acknowledged,
    // and the final report (on stderr without --json) came out.
    let report_start = err.find("{\n").unwrap_or_else(|| panic!("no report:\n{err}"));
    let report: serde_json::Value =
        serde_json::from_str(&err[report_start..]).unwrap_or_else(|e| panic!("{e}:\n{err}"));
    let read = report["mdt0"]["records"].as_u64().unwrap();
    assert!(read as usize <= records, "{report}");
    let cp: serde_json::Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("state/fs0-MDT0000.checkpoint.json")).unwrap()).unwrap();
    assert_eq!(
        cp["index"].as_u64(),
        report["mdt0"]["cleared_index"].as_u64(),
        "the checkpoint is the last acknowledged index: {report}"
    );
}

#[test]
fn top_once_prints_the_status_for_scripts_and_says_when_it_cannot() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut child, addr, records) = running_monitor(tmp.path());
    let (code, out, err) = common::icicle(&["top", "--connect", &addr, "--once", "--json"], &[]);
    assert_eq!(code, 0, "{err}");
    let s: icicle_core::metrics::MetricsSnapshot = serde_json::from_str(&out).unwrap();
    assert_eq!(s.get("icicle_records_in_total", &[("component", "mdt0")]), Some(records as f64));
    let (code, out, _) = common::icicle(&["top", "--connect", &addr, "--once"], &[]);
    assert_eq!(code, 0);
    assert!(out.starts_with(&format!("status: in {}", icicle_tui::dashboard::human(records as f64))), "{out}");
    child.kill().unwrap();
    let _ = child.wait();
    let (code, out, err) = common::icicle(&["top", "--connect", &addr, "--once", "--json"], &[]);
    assert_eq!(code, 1);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains(&addr) && err.contains("refused"), "{err}");
}

#[test]
fn the_dashboard_says_when_its_source_is_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut child, addr, _) = running_monitor(tmp.path());
    let sock = format!("icicle-gone-{}", std::process::id());
    let top = format!("{} top --connect {addr} --interval 0.2", env!("CARGO_BIN_EXE_icicle"));
    assert!(tmux(&sock, &["new-session", "-d", "-s", "top", "-x", "120", "-y", "30", &top]).status.success());
    wait_for_screen(&sock, "records in");
    child.kill().unwrap();
    let _ = child.wait();
    let screen = wait_for_screen(&sock, "DISCONNECTED");
    assert!(screen.contains("last data") && screen.contains("UTC") && screen.contains(&addr), "{screen}");
    let _ = tmux(&sock, &["kill-server"]);
}

/// Open descriptors of process `pid`.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// Hostile clients cannot exhaust a monitor through its metrics server: 300 idle connections
/// against a monitor limited to 256 descriptors leave it within its limit, its changelog
/// reads working (new records are read and cleared while they are open), a real request
/// answered, and the idle connections closed by the server.
#[test]
fn idle_connections_cannot_exhaust_a_monitor() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut child, addr, _) = running_monitor_limited(tmp.path(), Some(256));
    let before = open_fds(child.id());
    // Our own limit must allow the connections.
    // SAFETY: plain getrlimit/setrlimit on this process.
    unsafe {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max.min(4096);
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    let idle: Vec<std::net::TcpStream> = (0..300).map(|_| std::net::TcpStream::connect(&addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(500));
    let during = open_fds(child.id());
    assert!(
        during <= before + icicle_core::metrics::MAX_CONNECTIONS + 8,
        "the monitor holds {during} descriptors with 300 idle connections open (had {before})"
    );
    // The source still works: more records are read and cleared while the connections stay.
    let root = tmp.path().join("fs");
    let journal = tmp.path().join("lfs/changelog");
    let mut w = Workload::open(&root, &journal, 4).unwrap();
    w.run(Kind::Mixed, 50, "/more").unwrap();
    drop(w);
    let last = *common::journal_indexes(&journal).last().unwrap();
    let t = Instant::now();
    loop {
        // Answered once a slot frees (idle connections are closed after the head timeout).
        if let Ok(s) = icicle_tui::dashboard::fetch_status(&addr) {
            if s.get("icicle_changelog_cleared", &[("component", "mdt0"), ("mdt", "fs0-MDT0000")]) == Some(last as f64)
            {
                break;
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "the monitor never read the new records; log ends {}",
            common::log_of(tmp.path())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Every idle connection is closed by the server (EOF), none left hanging.
    for mut s in idle {
        use std::io::Read;
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let mut b = [0u8; 64];
        assert!(matches!(s.read(&mut b), Ok(0) | Err(_)), "an idle connection got data");
    }
    assert!(child.try_wait().unwrap().is_none(), "the monitor stopped");
    let _ = child.kill();
    let _ = child.wait();
}

/// `icicle top --connect` to something that is not an icicle's metrics endpoint says so: a
/// port nothing listens on, a server answering 404, one answering JSON of another shape.
#[test]
fn top_against_something_else_says_what_it_found() {
    use std::io::{Read, Write};
    // One HTTP answer from a server that is not icicle's.
    let serve_once = |status: &'static str, body: &'static str| -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = listener.accept() {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = write!(s, "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            }
        });
        addr
    };
    let top = |addr: &str| common::icicle(&["top", "--once", "--connect", addr], &[]);
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let (code, _, err) = top(&closed);
    assert!(code != 0 && err.contains(&closed), "{err}");
    let addr = serve_once("404 Not Found", "{}");
    let (code, _, err) = top(&addr);
    assert!(code != 0 && err.contains("answered 404 Not Found: not an icicle metrics endpoint?"), "{err}");
    let addr = serve_once("200 OK", "{\"status\":\"ok\"}");
    let (code, _, err) = top(&addr);
    assert!(code != 0 && err.contains("is not an icicle's /status"), "{err}");
}

/// Under systemd (`Type=notify`, `WatchdogSec=`): the monitor says READY=1 once running, pings
/// WATCHDOG=1 while its batches go through, and says STOPPING=1 on SIGTERM before it ends;
/// `[metrics] addr` in the configuration serves the endpoint as `--metrics-addr` does.
#[test]
fn the_monitor_speaks_sd_notify_and_serves_metrics_from_its_config() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("fs");
    let journal = tmp.path().join("lfs/changelog");
    let mut w = Workload::open(&root, &journal, 5).unwrap();
    w.preexisting(10).unwrap();
    w.run(Kind::Mixed, 50, "/work").unwrap();
    drop(w);
    let testkit = Path::new(env!("CARGO_BIN_EXE_icicle")).with_file_name("icicle-testkit");
    let cfg = common::config(
        tmp.path(),
        "m.toml",
        &format!(
            "[metrics]\naddr = \"127.0.0.1:0\"\n[records]\nvisible_to = [\"public\"]\n[sources.mdt0]\ntype = \"lustre\"\nmdt = \"fs0-MDT0000\"\nlfs = [\"{k}\", \"lfs\", \"--journal\", \"{j}\", \"--mount\", \"{r}\", \"--delay-ms\", \"0\"]\n\
             mount = \"{r}\"\nfsname = \"fs0\"\nbatch_size = 20\nquiet_period_secs = 0.0\npoll_interval_secs = 0.1\nstate_dir = \"{t}/state\"\n[sinks.o]\ntype = \"file\"\ndir = \"{t}/out\"\n",
            k = testkit.display(),
            j = journal.display(),
            r = root.display(),
            t = tmp.path().display()
        ),
    );
    let sock_path = tmp.path().join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_icicle"))
        .args(["monitor", "-c", cfg.to_str().unwrap()])
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "200000")
        .env_remove("WATCHDOG_PID")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "the monitor ended before serving metrics");
        if line.starts_with("metrics on http://127.0.0.1:") {
            break;
        }
    }
    std::thread::spawn(move || for _ in err.lines() {});
    let mut seen: Vec<String> = Vec::new();
    let mut buf = [0u8; 4096];
    let mut recv = |seen: &mut Vec<String>| {
        let n = sock.recv(&mut buf).expect("a notification");
        seen.extend(String::from_utf8_lossy(&buf[..n]).lines().map(String::from));
    };
    while !(seen.iter().any(|l| l == "READY=1") && seen.iter().filter(|l| *l == "WATCHDOG=1").count() >= 2) {
        recv(&mut seen);
    }
    assert!(seen.iter().any(|l| l.starts_with("STATUS=monitoring 1 source")), "{seen:?}");
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    while !seen.iter().any(|l| l == "STOPPING=1") {
        recv(&mut seen);
    }
    assert!(child.wait().unwrap().success());
}

/// A key pressed after the terminal was resized is taken at once, every time (it used to
/// wait for the next key: the resize took its wake-up).
#[test]
fn the_first_key_after_a_resize_is_taken() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut child, addr, _) = running_monitor(tmp.path());
    let sock = format!("icicle-resize-{}", std::process::id());
    let top = format!("{} top --connect {addr} --interval 0.3", env!("CARGO_BIN_EXE_icicle"));
    let st = tmux(&sock, &["new-session", "-d", "-s", "top", "-x", "140", "-y", "40", &top]);
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    wait_for_screen(&sock, "records in");
    for (round, width) in [120, 150, 110, 160, 130, 140].into_iter().enumerate() {
        let st = tmux(&sock, &["resize-window", "-t", "top", "-x", &width.to_string(), "-y", "40"]);
        assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
        // Redrawn at the new size before the key comes.
        std::thread::sleep(Duration::from_millis(500));
        let (key, shows) = if round % 2 == 0 { ("2", "MDT fs0-MDT0000") } else { ("4", "acknowledged deliveries") };
        tmux(&sock, &["send-keys", "-t", "top", key]);
        let screen = wait_for_screen(&sock, shows);
        assert!(screen.lines().all(|l| l.chars().count() <= width), "round {round}: wider than {width}:\n{screen}");
    }
    let _ = tmux(&sock, &["kill-server"]);
    child.kill().unwrap();
    let _ = child.wait();
}
