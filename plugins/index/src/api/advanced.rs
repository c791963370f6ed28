//! Query strings: the simple form (whitespace-separated terms, all required, each word of a
//! term a word of the record's path, type or kind; a trailing `*` makes the last word a
//! prefix) and the advanced syntax (`advanced: true`) subset the testkit's emulator also
//! implements: `field:value` (`value*` a prefix of a text field), `field:[a TO b]` (`*`
//! open), `field:>n`, `>=`, `<`, `<=`, quoted phrases and bare terms (words, as above),
//! `AND`, `OR`, `NOT` / `-`, parentheses; terms side by side are all required.
//! (<https://docs.globus.org/api/search/query/> describes both forms.)

use serde_json::Value;
use tantivy::query::{AllQuery, BooleanQuery, EmptyQuery, Occur, Query, RegexQuery, TermQuery};
use tantivy::schema::IndexRecordOption;
use tantivy::Term;

use super::fields::{equals, range, restrict, target, End, Kind};
use crate::schema::Fields;

/// Search's limit on a query string's length.
pub const MAX_QUERY_CHARS: usize = 256;

/// Lower-cased letter and digit runs (what the `default` tokenizer keeps of a string).
fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

/// Escape a literal for a tantivy regular expression.
fn literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$#&-~\"<>@".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Every word of `term` among the record's words; the last one a prefix when `prefix`.
fn words_query(f: &Fields, term: &str, prefix: bool) -> Result<Box<dyn Query>, String> {
    let ws = words(term);
    let mut must: Vec<(Occur, Box<dyn Query>)> = Vec::new();
    for (i, w) in ws.iter().enumerate() {
        let q: Box<dyn Query> = if prefix && i + 1 == ws.len() {
            Box::new(
                RegexQuery::from_pattern(&format!("{}.*", literal(w)), f.words)
                    .map_err(|e| format!("`{term}`: {e}"))?,
            )
        } else {
            Box::new(TermQuery::new(Term::from_field_text(f.words, w), IndexRecordOption::Basic))
        };
        must.push((Occur::Must, q));
    }
    Ok(if must.is_empty() { Box::new(AllQuery) } else { Box::new(BooleanQuery::new(must)) })
}

/// A simple query string: `*` (or nothing) is every record.
pub fn simple(f: &Fields, q: &str) -> Result<Box<dyn Query>, String> {
    check_length(q)?;
    let terms: Vec<&str> = q.split_whitespace().filter(|t| t.chars().any(char::is_alphanumeric)).collect();
    if terms.is_empty() {
        return Ok(Box::new(AllQuery));
    }
    let parts = terms
        .iter()
        .map(|t| Ok((Occur::Must, words_query(f, t, t.ends_with('*'))?)))
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Box::new(BooleanQuery::new(parts)))
}

fn check_length(q: &str) -> Result<(), String> {
    let n = q.chars().count();
    if n > MAX_QUERY_CHARS {
        return Err(format!("the query string is {n} characters long, over the limit of {MAX_QUERY_CHARS}"));
    }
    Ok(())
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

struct Parser<'a> {
    f: &'a Fields,
    tokens: Vec<String>,
    at: usize,
}

fn all_of(mut parts: Vec<Box<dyn Query>>, occur: Occur) -> Box<dyn Query> {
    if parts.len() == 1 {
        return parts.remove(0);
    }
    Box::new(BooleanQuery::new(parts.into_iter().map(|q| (occur, q)).collect()))
}

fn not(q: Box<dyn Query>) -> Box<dyn Query> {
    Box::new(BooleanQuery::new(vec![(Occur::Must, Box::new(AllQuery)), (Occur::MustNot, q)]))
}

impl Parser<'_> {
    fn peek(&self) -> Option<&str> {
        self.tokens.get(self.at).map(String::as_str)
    }

    fn or(&mut self) -> Result<Box<dyn Query>, String> {
        let mut parts = vec![self.and()?];
        while self.peek() == Some("OR") {
            self.at += 1;
            parts.push(self.and()?);
        }
        Ok(all_of(parts, Occur::Should))
    }

    fn and(&mut self) -> Result<Box<dyn Query>, String> {
        let mut parts = vec![self.unary()?];
        loop {
            match self.peek() {
                Some("AND") => self.at += 1,
                None | Some("OR" | ")") => break,
                Some(_) => {}
            }
            parts.push(self.unary()?);
        }
        Ok(all_of(parts, Occur::Must))
    }

    fn unary(&mut self) -> Result<Box<dyn Query>, String> {
        let Some(t) = self.peek().map(str::to_string) else {
            return Err("the query ends where a term was expected".into());
        };
        self.at += 1;
        match t.as_str() {
            "NOT" | "-" => Ok(not(self.unary()?)),
            "(" => {
                let e = self.or()?;
                if self.peek() != Some(")") {
                    return Err("a `(` is not closed".into());
                }
                self.at += 1;
                Ok(e)
            }
            t if t.len() > 1 && t.starts_with('-') => Ok(not(primary(self.f, &t[1..])?)),
            t => primary(self.f, t),
        }
    }
}

/// One token that is not an operator or a parenthesis.
fn primary(f: &Fields, t: &str) -> Result<Box<dyn Query>, String> {
    let unquote = |s: &str| s.trim_matches('"').to_string();
    let Some((field, value)) = t.split_once(':').filter(|(f, _)| !f.is_empty() && !f.starts_with('"')) else {
        return words_query(f, &unquote(t), t.ends_with('*'));
    };
    let target = target(f, field)?;
    let end = |s: &str, with: bool| {
        let s = s.trim();
        if s == "*" {
            End::Open
        } else {
            End::At(Value::String(s.to_string()), with)
        }
    };
    if let Some(inner) = value.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
        let (a, b) = inner.split_once(" TO ").ok_or_else(|| format!("a range is [from TO to], not `{value}`"))?;
        return Ok(restrict(f, &target, range(&target, &end(a, true), &end(b, true))?));
    }
    // `>=` and `<=` before `>` and `<`.
    for (op, lower) in [(">=", true), ("<=", false), (">", true), ("<", false)] {
        if let Some(v) = value.strip_prefix(op) {
            let at = end(v, op.len() == 2);
            let q = if lower { range(&target, &at, &End::Open)? } else { range(&target, &End::Open, &at)? };
            return Ok(restrict(f, &target, q));
        }
    }
    let v = unquote(value);
    let q: Box<dyn Query> = match (target.kind, v.strip_suffix('*')) {
        (Kind::Text, Some(p)) => Box::new(
            RegexQuery::from_pattern(&format!("{}.*", literal(p)), target.field).map_err(|e| format!("`{t}`: {e}"))?,
        ),
        (Kind::Text, None) => equals(&target, &Value::String(v))?,
        (_, _) => match v.parse::<f64>() {
            Ok(n) => equals(&target, &serde_json::json!(n))?,
            Err(_) if target.kind == Kind::Time => equals(&target, &Value::String(v))?,
            Err(_) => Box::new(EmptyQuery),
        },
    };
    Ok(restrict(f, &target, q))
}

/// Parse an advanced query string into the engine's query.
pub fn advanced(f: &Fields, q: &str) -> Result<Box<dyn Query>, String> {
    check_length(q)?;
    let mut p = Parser { f, tokens: tokens(q)?, at: 0 };
    if p.tokens.is_empty() || p.tokens == ["*"] {
        return Ok(Box::new(AllQuery));
    }
    let e = p.or()?;
    match p.peek() {
        None => Ok(e),
        Some(t) => Err(format!("unexpected `{t}` in the advanced query")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_strings_parse_or_say_why_not() {
        let (_, f) = Fields::schema();
        for ok in ["*", "", "alpha", "alph* beta", "f1000-3651"] {
            assert!(simple(&f, ok).is_ok(), "{ok}");
        }
        for ok in [
            "size:>=20 AND NOT type:link",
            "(uid:1 OR uid:2) -name:x",
            "mtime:[2020-01-01 TO *]",
            "path:\"/a b\"",
            "name:ab*",
        ] {
            assert!(advanced(&f, ok).is_ok(), "{ok}");
        }
        assert!(advanced(&f, "(uid:1").unwrap_err().contains("not closed"));
        assert!(advanced(&f, "inode:3").unwrap_err().contains("searchable fields"));
        assert!(simple(&f, &"x".repeat(300)).unwrap_err().contains("256"));
    }
}
