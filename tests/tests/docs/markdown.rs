//! Just enough Markdown for the documentation checks in `docs.rs`: the lines
//! outside code (fenced blocks and inline spans), the headings' anchors as
//! GitHub makes them, the links, and the cells of tables.

/// The lines of `text` outside fenced code blocks, with their 1-based numbers.
pub fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if !fence {
            out.push((i + 1, line));
        }
    }
    out
}

/// `line` with its inline code spans (`` `...` ``) blanked out, so that a
/// link written inside code is not taken for one.
fn without_code(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else {
            out.push(if in_code { ' ' } else { c });
        }
    }
    out
}

/// The targets of the inline links `[text](target)` on the prose lines of
/// `text`, with their line numbers.
pub fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose_lines(text) {
        let line = without_code(line);
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = rest[..end].trim();
            // `[x](url "title")`: the title is not part of the target.
            let target = target.split_whitespace().next().unwrap_or("");
            out.push((n, target.to_string()));
            rest = &rest[end + 1..];
        }
    }
    out
}

/// The anchor GitHub gives a heading: lower case, code marks and punctuation
/// other than `-` and `_` dropped, spaces made `-`.
pub fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of every heading in `text`; a repeated heading gets `-1`,
/// `-2` ... as on GitHub.
pub fn anchors(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let mut anchor = base.clone();
        let mut n = 0;
        while out.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        out.push(anchor);
    }
    out
}

/// The section of `text` under the heading `title` (any level), up to the
/// next heading of the same or a higher level.
pub fn section<'a>(text: &'a str, title: &str) -> Option<&'a str> {
    let lines = prose_lines(text);
    let (start, level) = lines.iter().find_map(|&(n, l)| {
        let hashes = l.chars().take_while(|&c| c == '#').count();
        (hashes > 0 && l[hashes..].trim() == title).then_some((n, hashes))
    })?;
    let end = lines
        .iter()
        .filter(|&&(n, _)| n > start)
        .find(|&&(_, l)| {
            let hashes = l.chars().take_while(|&c| c == '#').count();
            hashes > 0 && hashes <= level && l[hashes..].starts_with(' ')
        })
        .map(|&(n, _)| n);
    let body: Vec<&str> = text.lines().collect();
    let end = end.unwrap_or(body.len() + 1);
    let from = text
        .lines()
        .take(start - 1)
        .map(|l| l.len() + 1)
        .sum::<usize>();
    let to = text
        .lines()
        .take(end - 1)
        .map(|l| l.len() + 1)
        .sum::<usize>();
    Some(&text[from..to.min(text.len())])
}

/// The cells of every table row (a prose line starting with `|`), with the
/// line number; escaped bars (`\|`) stay inside their cell.
pub fn table_cells(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose_lines(text) {
        let line = line.trim();
        if !line.starts_with('|') {
            continue;
        }
        let mut cell = String::new();
        let mut chars = line[1..].chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if chars.peek() == Some(&'|') => {
                    cell.push('|');
                    chars.next();
                }
                '|' => out.push((n, std::mem::take(&mut cell).trim().to_string())),
                c => cell.push(c),
            }
        }
    }
    out
}
