//! The advanced query syntax (`advanced: true`), the subset the emulator implements:
//! `field:value` (a leaf equal to the value, or a string holding all of its words; `value*`
//! a prefix), `field:[a TO b]` (inclusive, `*` open), `field:>n`, `>=`, `<`, `<=`, quoted
//! phrases, bare terms (matched against every word of the content, as simple queries are),
//! `AND`, `OR`, `NOT` / `-`, and parentheses. Terms side by side are all required.

use std::cmp::Ordering;
use std::collections::HashSet;

use serde_json::Value;

use super::query::Bound;
use super::values::{content_words, leaves, value_eq, words};

/// A parsed advanced query.
#[derive(Debug, Clone)]
pub(super) enum Expr {
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Not(Box<Expr>),
    /// Words anywhere in the content; the last one a prefix when it ended in `*`.
    Words(Vec<String>, bool),
    /// `field:value`.
    Field(String, String),
    /// `field:[from TO to]` and the comparisons; the flag: the bounds themselves are out (`>`, `<`).
    Range(String, Bound, Bound, bool),
}

/// Split into tokens: parentheses, quoted phrases (kept with their quotes) and words.
fn tokens(q: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut chars = q.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '(' || c == ')' {
            out.push(c.to_string());
            chars.next();
        } else {
            let mut t = String::new();
            let (mut quoted, mut bracket) = (false, false);
            while let Some(&c) = chars.peek() {
                match c {
                    '"' => quoted = !quoted,
                    '[' if !quoted => bracket = true,
                    ']' if !quoted => bracket = false,
                    c if !quoted && !bracket && (c.is_whitespace() || c == '(' || c == ')') => break,
                    _ => {}
                }
                t.push(c);
                chars.next();
            }
            if quoted || bracket {
                return Err(format!("unclosed quote or range in `{t}`"));
            }
            out.push(t);
        }
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<String>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&str> {
        self.tokens.get(self.at).map(String::as_str)
    }

    fn or(&mut self) -> Result<Expr, String> {
        let mut parts = vec![self.and()?];
        while self.peek() == Some("OR") {
            self.at += 1;
            parts.push(self.and()?);
        }
        Ok(if parts.len() == 1 { parts.remove(0) } else { Expr::Or(parts) })
    }

    fn and(&mut self) -> Result<Expr, String> {
        let mut parts = vec![self.unary()?];
        loop {
            match self.peek() {
                Some("AND") => self.at += 1,
                None | Some("OR" | ")") => break,
                Some(_) => {}
            }
            parts.push(self.unary()?);
        }
        Ok(if parts.len() == 1 { parts.remove(0) } else { Expr::And(parts) })
    }

    fn unary(&mut self) -> Result<Expr, String> {
        match self.peek() {
            Some("NOT" | "-") => {
                self.at += 1;
                Ok(Expr::Not(Box::new(self.unary()?)))
            }
            Some(t) if t.len() > 1 && t.starts_with('-') => {
                let rest = t[1..].to_string();
                self.at += 1;
                Ok(Expr::Not(Box::new(primary(&rest)?)))
            }
            Some("(") => {
                self.at += 1;
                let e = self.or()?;
                if self.peek() != Some(")") {
                    return Err("a `(` is not closed".into());
                }
                self.at += 1;
                Ok(e)
            }
            Some(t) => {
                let t = t.to_string();
                self.at += 1;
                primary(&t)
            }
            None => Err("the query ends where a term was expected".into()),
        }
    }
}

/// One token that is not an operator or a parenthesis.
fn primary(t: &str) -> Result<Expr, String> {
    let unquote = |s: &str| s.trim_matches('"').to_string();
    let Some((field, value)) = t.split_once(':').filter(|(f, _)| !f.is_empty() && !f.starts_with('"')) else {
        let text = unquote(t);
        return Ok(Expr::Words(words(&text).collect(), t.ends_with('*')));
    };
    let bound = |s: &str| Bound::of(Some(&Value::String(s.trim().to_string())));
    let field = field.to_string();
    if let Some(inner) = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
        let (a, b) = inner.split_once(" TO ").ok_or_else(|| format!("a range is [from TO to], not `{value}`"))?;
        return Ok(Expr::Range(field, bound(a)?, bound(b)?, false));
    }
    // `>=` and `<=` before `>` and `<`.
    for (op, lower) in [(">=", true), ("<=", false), (">", true), ("<", false)] {
        if let Some(v) = value.strip_prefix(op) {
            let (b, strict) = (bound(v)?, op.len() == 1);
            return Ok(if lower {
                Expr::Range(field, b, Bound::Open, strict)
            } else {
                Expr::Range(field, Bound::Open, b, strict)
            });
        }
    }
    Ok(Expr::Field(field, unquote(value)))
}

/// Parse `q`.
pub(super) fn parse(q: &str) -> Result<Expr, String> {
    let mut p = Parser { tokens: tokens(q)?, at: 0 };
    if p.tokens.is_empty() || p.tokens == ["*"] {
        return Ok(Expr::And(Vec::new()));
    }
    let e = p.or()?;
    match p.peek() {
        None => Ok(e),
        Some(t) => Err(format!("unexpected `{t}` in the advanced query")),
    }
}

impl Expr {
    /// Whether `content` satisfies the expression.
    pub(super) fn holds(&self, content: &Value) -> bool {
        match self {
            Expr::And(v) => v.iter().all(|e| e.holds(content)),
            Expr::Or(v) => v.iter().any(|e| e.holds(content)),
            Expr::Not(e) => !e.holds(content),
            Expr::Words(ws, prefix) => {
                let mut all = HashSet::new();
                content_words(content, &mut all);
                ws.iter().enumerate().all(|(i, w)| {
                    if *prefix && i + 1 == ws.len() {
                        all.iter().any(|x| x.starts_with(w.as_str()))
                    } else {
                        all.contains(w)
                    }
                })
            }
            Expr::Field(f, v) => {
                let prefix = v.strip_suffix('*');
                leaves(content, f).iter().any(|leaf| match (prefix, leaf) {
                    (Some(p), Value::String(s)) => words(s).any(|w| w.starts_with(&p.to_lowercase())),
                    (None, Value::String(s)) => {
                        let have: HashSet<String> = words(s).collect();
                        value_eq(leaf, &Value::String(v.clone())) || words(v).all(|w| have.contains(&w))
                    }
                    (_, leaf) => value_eq(leaf, &Value::String(v.clone())),
                })
            }
            Expr::Range(f, from, to, strict) => leaves(content, f).iter().any(|v| {
                let inside = |o: Option<Ordering>, want: Ordering| {
                    o.is_some_and(|o| o == want || (!strict && o == Ordering::Equal))
                };
                let lo = matches!(from, Bound::Open) || inside(from.compare(v), Ordering::Greater);
                let hi = matches!(to, Bound::Open) || inside(to.compare(v), Ordering::Less);
                lo && hi
            }),
        }
    }
}
