//! Text a sandboxed server chose (a path, a host, a tool name), made safe to
//! show a person: control characters and the invisible format characters
//! (zero-width, line and paragraph separators, bidi embeddings, overrides
//! and isolates, BOM, tags) are written as `\u{...}` escapes, so the text
//! can neither move the cursor, end a line, nor reorder what is shown around
//! it; a text longer than `max` characters keeps its two ends around `…`.

/// `s` as shown to a person (see the module doc).
pub fn shown(s: &str, max: usize) -> String {
    let mut out = String::new();
    let total = s.chars().count();
    for (i, c) in s.chars().enumerate() {
        if total > max && i == max / 2 {
            out.push('…');
        }
        if total > max && i >= max / 2 && i < total - max / 2 {
            continue;
        }
        let invisible = matches!(c as u32,
            0x00AD | 0x061C | 0x180E | 0x200B..=0x200F | 0x2028..=0x202E
            | 0x2060..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB | 0xE0000..=0xE007F);
        if c.is_control() || invisible {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn controls_and_format_characters_are_escaped_and_long_texts_cut() {
        assert_eq!(shown("/tmp/a b", 100), "/tmp/a b");
        assert_eq!(
            shown("/x\r\nwarden: \u{1b}[2J\u{202e}", 100),
            "/x\\u{d}\\u{a}warden: \\u{1b}[2J\\u{202e}"
        );
        let long = format!("/{}", "a".repeat(1000));
        let s = shown(&long, 20);
        assert_eq!(s.chars().count(), 21);
        assert!(s.starts_with("/aaaaaaaa") && s.contains('…'));
    }
}
