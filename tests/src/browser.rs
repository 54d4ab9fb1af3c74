//! Headless Chromium for the browser tests: a page's DOM after its scripts ran, and screenshots.
//!
//! The Debian package `chromium` (`make tools` installs it); `BATON_CHROMIUM` names another
//! binary. Each run gets its own profile directory, so runs in parallel do not share one. A
//! browser that crashes (it happens under load) is started again, twice at most; its exit and
//! the end of its stderr are in the panic if it never succeeds.

use std::path::{Path, PathBuf};
use std::process::Command;

use scraper::Selector;
pub use scraper::{ElementRef, Html};

/// Where the browser tests save their screenshots: `target/screens` in the workspace.
pub fn screens_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/screens");
    std::fs::create_dir_all(&dir).expect("create target/screens");
    dir.canonicalize().expect("target/screens")
}

/// A headless Chromium.
pub struct Browser {
    binary: PathBuf,
}

impl Browser {
    /// The browser `BATON_CHROMIUM` names, or `chromium` on the PATH. Panics with what to do
    /// when there is none.
    pub fn find() -> Browser {
        if let Some(binary) = std::env::var_os("BATON_CHROMIUM") {
            return Browser { binary: binary.into() };
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        let found = std::env::split_paths(&path)
            .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
            .find(|candidate| candidate.is_file());
        match found {
            Some(binary) => Browser { binary },
            None => panic!(
                "the browser tests need headless Chromium: `make tools` installs it \
                 (apt-get install chromium), or set BATON_CHROMIUM to a Chromium binary"
            ),
        }
    }

    /// The DOM of `url` once its scripts ran, in a window `width` pixels wide.
    pub fn dom(&self, url: &str, width: u32) -> Html {
        let out = self.run(&["--dump-dom".to_owned(), url.to_owned()], width, 2000);
        Html::parse_document(&String::from_utf8_lossy(&out))
    }

    /// A screenshot of `url`, `width` by `height` pixels, saved to `path`.
    pub fn screenshot(&self, url: &str, path: &Path, width: u32, height: u32) {
        let _ = std::fs::remove_file(path);
        self.run(&[format!("--screenshot={}", path.display()), url.to_owned()], width, height);
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        assert!(size > 0, "no screenshot of {url} at {}", path.display());
    }

    fn run(&self, args: &[String], width: u32, height: u32) -> Vec<u8> {
        let mut last = String::new();
        for _ in 0..3 {
            let profile = tempfile::tempdir().expect("a profile directory");
            let out = Command::new(&self.binary)
                .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"])
                .args([
                    "--disable-extensions",
                    "--disable-background-networking",
                    "--virtual-time-budget=10000",
                ])
                .arg(format!("--window-size={width},{height}"))
                .arg(format!("--user-data-dir={}", profile.path().display()))
                .args(args)
                .output()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", self.binary.display()));
            if out.status.success() {
                return out.stdout;
            }
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
            last = format!("{} ({})", out.status, tail.join(" | "));
        }
        panic!("{} failed three times: {last}", self.binary.display());
    }
}

/// The elements of `dom` that `selector` matches.
pub fn select<'a>(dom: &'a Html, selector: &str) -> Vec<ElementRef<'a>> {
    let parsed = Selector::parse(selector).unwrap_or_else(|e| panic!("selector {selector:?}: {e}"));
    dom.select(&parsed).collect()
}

/// The text of an element, whitespace collapsed.
pub fn text(element: &ElementRef) -> String {
    element.text().collect::<Vec<_>>().join(" ").split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The text of the one element `selector` matches; panics when there is not exactly one.
pub fn only_text(dom: &Html, selector: &str) -> String {
    let found = select(dom, selector);
    assert_eq!(found.len(), 1, "{selector:?} should match once, matched {}", found.len());
    text(&found[0])
}

/// The text of what `selector` matches inside `element`.
pub fn text_in(element: &ElementRef, selector: &str) -> String {
    let parsed = Selector::parse(selector).unwrap_or_else(|e| panic!("selector {selector:?}: {e}"));
    element.select(&parsed).map(|e| text(&e)).collect::<Vec<_>>().join(" ")
}
