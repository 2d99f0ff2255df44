//! Python's character classes where Rust's look-alikes differ (`str.isspace()` and
//! `str.strip()`, `str.isalnum()`, decimal digits for `int()`). Key parts and peer records must
//! be read exactly as Pallas-Bot reads them.

use unicode_general_category::{GeneralCategory as G, get_general_category};

/// Python's `str.isspace()` / `re` `\s` (str patterns).
pub fn is_py_whitespace(c: char) -> bool {
    matches!(c,
        '\u{9}'..='\u{d}' | '\u{1c}'..='\u{20}' | '\u{85}' | '\u{a0}' | '\u{1680}'
        | '\u{2000}'..='\u{200a}' | '\u{2028}' | '\u{2029}' | '\u{202f}' | '\u{205f}' | '\u{3000}')
}

/// `str.strip()` without arguments.
pub fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_whitespace)
}

/// `str.isalnum()` for one character: a letter (`L*`) or a number (`N*`). Rust's
/// `is_alphanumeric` also keeps marks such as U+093E and symbols such as Ⓐ.
pub fn is_alnum(c: char) -> bool {
    matches!(
        get_general_category(c),
        G::UppercaseLetter
            | G::LowercaseLetter
            | G::TitlecaseLetter
            | G::ModifierLetter
            | G::OtherLetter
            | G::DecimalNumber
            | G::LetterNumber
            | G::OtherNumber
    )
}

/// The value of a decimal digit of any script (`Nd`), as `int()` reads it. Unicode lays out
/// every decimal digit set as runs of ten from zero.
pub fn decimal_value(c: char) -> Option<u32> {
    if get_general_category(c) != G::DecimalNumber {
        return None;
    }
    let cp = c as u32;
    let run_start = (1..=cp)
        .map(|k| cp - k)
        .take_while(|p| {
            char::from_u32(*p).is_some_and(|d| get_general_category(d) == G::DecimalNumber)
        })
        .count() as u32;
    Some(run_start % 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_classes() {
        for c in ['a', 'Z', '牛', '٣', '²', 'Ⅻ', 'ß'] {
            assert!(is_alnum(c), "{c:?}");
        }
        assert!(!is_alnum('\u{093E}') && !is_alnum('Ⓐ') && !is_alnum('-') && !is_alnum('_'));
        assert_eq!(decimal_value('7'), Some(7));
        assert_eq!(decimal_value('０'), Some(0));
        assert_eq!(decimal_value('９'), Some(9));
        assert_eq!(decimal_value('٣'), Some(3));
        assert_eq!(
            decimal_value('𝟗'),
            Some(9),
            "mathematical digits: five runs of ten"
        );
        assert_eq!(decimal_value('𝟘'), Some(0));
        assert_eq!(decimal_value('²'), None);
        assert_eq!(decimal_value('a'), None);
    }
}
