//! Headless Chromium over the DevTools protocol on a pipe (`--remote-debugging-pipe`: the
//! browser reads commands on fd 3 and writes replies on fd 4, each a JSON message ended by a
//! NUL byte), for tests/web_page.rs: no driver, no library beyond Debian's `chromium`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use serde_json::{json, Value};

/// The longest a page may take to answer one step (a generous bound: a wait fails sooner on
/// a clear condition, the server or Chromium exiting).
pub const STEP: Duration = Duration::from_secs(240);

/// What a wait checks between polls: the server the page talks to is still running.
pub trait Alive {
    /// Panics when the server has exited.
    fn alive(&mut self);
}

/// Chromium, if installed (`ICICLE_TEST_CHROMIUM` names another binary).
pub fn chromium() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("ICICLE_TEST_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|n| std::env::split_paths(&path).map(move |d| d.join(n)))
        .find(|p| p.is_file())
}

/// A pipe (read end, write end), both close-on-exec.
fn pipe() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0, "pipe2");
    // SAFETY: both descriptors are new and owned by nobody else.
    unsafe { (std::fs::File::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1])) }
}

/// Headless Chromium and one page of it, over the DevTools protocol on a pipe.
pub struct Browser {
    child: Child,
    to: std::fs::File,
    from: Receiver<Value>,
    next: u64,
    session: String,
    /// Script exceptions and console/security messages the page reported.
    pub problems: Vec<String>,
}

impl Browser {
    pub fn start(bin: &Path, profile: &Path) -> Browser {
        use std::os::fd::AsRawFd;
        let (cmd_r, cmd_w) = pipe();
        let (out_r, out_w) = pipe();
        let (a, b) = (cmd_r.as_raw_fd(), out_w.as_raw_fd());
        let mut cmd = Command::new(bin);
        cmd.args([
            "--headless",
            "--remote-debugging-pipe",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
        ])
        .args([
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-sync",
            "--disable-component-update",
            "--mute-audio",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--window-size=1280,800", "about:blank"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            // Chromium's sandbox refuses to run as root (CI containers run tests as root).
            cmd.arg("--no-sandbox");
        }
        // SAFETY: only async-signal-safe calls (fcntl, dup2) between fork and exec: the
        // pipe ends become fds 3 (commands in) and 4 (replies out), through copies above 10 so
        // that neither end is overwritten before it is moved.
        unsafe {
            cmd.pre_exec(move || {
                let (x, y) = (libc::fcntl(a, libc::F_DUPFD_CLOEXEC, 10), libc::fcntl(b, libc::F_DUPFD_CLOEXEC, 10));
                if x < 0 || y < 0 || libc::dup2(x, 3) < 0 || libc::dup2(y, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
        let child = cmd.spawn().unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        drop((cmd_r, out_w));
        let (tx, from) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(out_r);
            let mut msg = Vec::new();
            while r.read_until(0, &mut msg).is_ok_and(|n| n > 0) {
                if msg.last() == Some(&0) {
                    msg.pop();
                }
                if let Ok(v) = serde_json::from_slice::<Value>(&msg) {
                    if tx.send(v).is_err() {
                        return;
                    }
                }
                msg.clear();
            }
        });
        let mut b = Browser { child, to: cmd_w, from, next: 0, session: String::new(), problems: Vec::new() };
        let target = b.send(None, "Target.createTarget", json!({"url": "about:blank"}))["result"].clone();
        let attached = b.send(None, "Target.attachToTarget", json!({"targetId": target["targetId"], "flatten": true}))
            ["result"]
            .clone();
        b.session = attached["sessionId"].as_str().expect("a session id").to_string();
        for m in ["Page.enable", "Runtime.enable", "Log.enable"] {
            b.call(m, json!({}));
        }
        b
    }

    /// Send one command (to the page's session, or to the browser) and wait for its reply
    /// (`result` or `error`).
    pub fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = msg.to_string().into_bytes();
        bytes.push(0);
        self.to
            .write_all(&bytes)
            .unwrap_or_else(|e| panic!("Chromium stopped reading commands ({e}): {:?}", self.child.try_wait()));
        loop {
            let v = match self.from.recv_timeout(STEP) {
                Ok(v) => v,
                Err(RecvTimeoutError::Disconnected) => panic!("Chromium exited: {:?}", self.child.wait()),
                Err(RecvTimeoutError::Timeout) => panic!("Chromium did not answer {method} within {STEP:?}"),
            };
            if v["id"].as_u64() == Some(id) {
                return v;
            }
            self.event(&v);
        }
    }

    /// Keep what the page reports that a page without faults would not.
    fn event(&mut self, v: &Value) {
        match v["method"].as_str() {
            Some("Runtime.exceptionThrown") => {
                self.problems.push(format!("exception: {}", v["params"]["exceptionDetails"]))
            }
            Some("Log.entryAdded") if v["params"]["entry"]["level"] == "error" => {
                let text = v["params"]["entry"]["text"].as_str().unwrap_or("").to_string();
                // A facet or page the server refuses is reported by the page; the 4xx line is not a fault.
                if !text.contains("the server responded with a status of 4") {
                    self.problems.push(format!("log: {text}"));
                }
            }
            Some("Runtime.consoleAPICalled") if v["params"]["type"] == "error" => {
                self.problems.push(format!("console: {}", v["params"]["args"]))
            }
            _ => {}
        }
    }

    /// A command to the page; its result (an error fails the test).
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let s = self.session.clone();
        let v = self.send(Some(&s), method, params);
        assert!(v.get("error").is_none(), "{method}: {}", v["error"]);
        v["result"].clone()
    }

    /// The value of a JavaScript expression in the page (promises awaited), or why not.
    pub fn try_eval(&mut self, js: &str) -> Result<Value, Value> {
        let s = self.session.clone();
        let v = self.send(
            Some(&s),
            "Runtime.evaluate",
            json!({"expression": js, "returnByValue": true, "awaitPromise": true}),
        );
        match (v.get("error"), v["result"].get("exceptionDetails")) {
            (Some(e), _) | (None, Some(e)) => Err(e.clone()),
            (None, None) => Ok(v["result"]["result"]["value"].clone()),
        }
    }

    /// The value of a JavaScript expression in the page (an exception fails the test).
    pub fn eval(&mut self, js: &str) -> Value {
        self.try_eval(js).unwrap_or_else(|e| panic!("{js}: {e}"))
    }

    /// Poll `js` until it is true; fails when serve or Chromium exits (or after [`STEP`]).
    pub fn wait_for(&mut self, serve: &mut dyn Alive, what: &str, js: &str) {
        let start = std::time::Instant::now();
        loop {
            serve.alive();
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("Chromium exited while waiting for {what}: {status}");
            }
            // While a page loads there may be no body or no context yet: not yet true.
            if self.try_eval(js) == Ok(json!(true)) {
                return;
            }
            assert!(
                start.elapsed() < STEP,
                "the page did not show {what} within {STEP:?}; status: {}",
                self.eval("document.getElementById('status').textContent")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// How many views the page has shown (its `data-done` counter).
    pub fn done(&mut self) -> u64 {
        self.try_eval("Number(document.body.dataset.done || 0)").ok().and_then(|v| v.as_u64()).unwrap_or(0)
    }

    /// Run `act` (a key press, a click), then wait for the view it starts to be shown.
    pub fn step(&mut self, serve: &mut dyn Alive, what: &str, act: impl FnOnce(&mut Browser)) {
        let before = self.done();
        act(self);
        self.wait_for(serve, what, &format!("Number(document.body.dataset.done || 0) > {before}"));
    }

    /// Press a key on the focused element (`Enter` or a space).
    pub fn key(&mut self, key: &str) {
        let (code, vk, text) = if key == "Enter" { ("Enter", 13, "\r") } else { ("Space", 32, " ") };
        self.call(
            "Input.dispatchKeyEvent",
            json!({"type": "keyDown", "key": key, "code": code, "windowsVirtualKeyCode": vk, "text": text}),
        );
        self.call(
            "Input.dispatchKeyEvent",
            json!({"type": "keyUp", "key": key, "code": code, "windowsVirtualKeyCode": vk}),
        );
    }

    /// Focus the element `selector` names (asserted to exist) and press `key`.
    pub fn press(&mut self, selector: &str, key: &str) {
        let sel = json!(selector);
        assert_eq!(
            self.eval(&format!(
                "(() => {{ const e = document.querySelector({sel}); if (!e) return false; e.focus(); return document.activeElement === e; }})()"
            )),
            json!(true),
            "focus {selector}"
        );
        self.key(key);
    }

    /// Type `text` into the focused field after clearing it.
    pub fn type_into(&mut self, selector: &str, text: &str) {
        let sel = json!(selector);
        self.eval(&format!("(() => {{ const e = document.querySelector({sel}); e.focus(); e.value = ''; }})()"));
        self.call("Input.insertText", json!({"text": text}));
    }

    pub fn viewport(&mut self, width: u32, height: u32, mobile: bool) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}),
        );
    }

    /// A PNG of the viewport, written to `path`; its size asserted.
    pub fn screenshot(&mut self, path: &Path, width: u32, height: u32) {
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64(r["data"].as_str().unwrap());
        assert_eq!(&png[1..4], b"PNG");
        let dim = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
        assert_eq!((dim(16), dim(20)), (width, height), "{}", path.display());
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Standard base64 decoded (the protocol's screenshots).
pub fn base64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let digits: Vec<u8> =
        s.bytes().filter(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/').map(val).collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, d)| n | (u32::from(*d) << (18 - 6 * i)));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}
