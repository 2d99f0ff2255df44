//! Ids interned to dense indices.
//!
//! Written ids share one text buffer and the hash tables hold only indices into it, so an id
//! costs its bytes plus 16–24, with no allocation of its own: a `Box<str>` per id in an
//! `IndexSet` cost some 60 bytes more and a `malloc`, which was most of what reading a
//! 10M-channel snapshot did.
//!
//! Most ids are decimal numbers (QQ's users and groups): those are looked up by their value,
//! so a look-up reads one table entry; comparing the text instead read the entry, the id's end
//! and its text, three cache misses on a large fleet (a fifth of the service's start-up CPU).
//! A channel interner keeps such a number below 2^32 as the number alone ([`Numbers::Implied`])
//! and writes its text only when it is read ([`Id`]): 4 bytes an id where the text and its end
//! took 13 for a 9-digit group (87 MB less at 10M channels).

use std::cell::OnceCell;
use std::cmp::Ordering;
use std::fmt;
use std::hash::BuildHasher;
use std::ops::Deref;

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use rustc_hash::FxBuildHasher;

use crate::model::{bit_set, canonical_number};

/// What an interner keeps of an id that is a number below 2^32.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Numbers {
    /// Its text, as of any other id: the bots, few, whose ids are read as `&str` everywhere.
    Written,
    /// The number alone: the channels, up to millions.
    Implied,
}

pub(super) struct Interner {
    numbers: Numbers,
    text: String,
    /// Where each written id ends in `text`; it starts where the one before ends.
    ends: Vec<u32>,
    /// Per index: the number of an implied id, or where a written one is in `ends`.
    slots: Vec<u32>,
    /// One bit per index: set where `slots` holds an implied number.
    implied: Vec<u64>,
    /// Ids that are numbers ([`canonical_number`]) below 2^32, as QQ's groups and users are:
    /// (the number, index). Eight bytes a slot where a `u64` number took sixteen (with its
    /// padding): 134 MB less at 10M channels, whose table has 2^24 slots.
    narrow_numbers: HashTable<(u32, u32)>,
    /// Every other number: (the number, index).
    wide_numbers: HashTable<(u64, u32)>,
    /// Every other id: (index, half of the id's hash, so that growing the table and most
    /// failed comparisons never touch the text).
    table: HashTable<(u32, u32)>,
}

/// An interned id: its text, or an implied number whose decimal text is written the first
/// time it is read. Not `Clone`, so that `to_owned` gives the text as a `String`.
pub struct Id<'a>(Repr<'a>);

enum Repr<'a> {
    Text(&'a str),
    Number(u32, OnceCell<Digits>),
}

/// The decimal digits of a `u32`: at most ten.
struct Digits {
    bytes: [u8; 10],
    len: u8,
}

impl Id<'_> {
    fn number(n: u32) -> Self {
        Id(Repr::Number(n, OnceCell::new()))
    }

    /// The order of ids shorter first, then by their bytes (numbers in numeric order), without
    /// writing a number's text where both are numbers.
    pub fn cmp_shorter_first(&self, other: &Id<'_>) -> Ordering {
        match (&self.0, &other.0) {
            // Of two canonical numbers, the one with fewer digits is the smaller.
            (Repr::Number(a, _), Repr::Number(b, _)) => a.cmp(b),
            _ => (self.len(), self.as_bytes()).cmp(&(other.len(), other.as_bytes())),
        }
    }
}

impl Deref for Id<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        match &self.0 {
            Repr::Text(text) => text,
            Repr::Number(n, digits) => {
                let Digits { bytes, len } = digits.get_or_init(|| {
                    let mut buffer = itoa::Buffer::new();
                    let text = buffer.format(*n).as_bytes();
                    let mut bytes = [0; 10];
                    bytes[..text.len()].copy_from_slice(text);
                    Digits {
                        bytes,
                        len: text.len() as u8,
                    }
                });
                std::str::from_utf8(&bytes[..*len as usize]).expect("decimal digits")
            }
        }
    }
}

impl fmt::Display for Id<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self)
    }
}

impl fmt::Debug for Id<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl PartialEq<&str> for Id<'_> {
    fn eq(&self, other: &&str) -> bool {
        **self == **other
    }
}

fn written<'a>(text: &'a str, ends: &[u32], at: u32) -> &'a str {
    let at = at as usize;
    let start = if at == 0 { 0 } else { ends[at - 1] as usize };
    &text[start..ends[at] as usize]
}

/// The index of number `n` in `table`, and whether it was new (`push_new` then records it
/// and gives its index). `hash` is [`number_hash`] of the number as a `u64`.
fn interned_number<N: Copy + Eq + Into<u64>>(
    table: &mut HashTable<(N, u32)>,
    n: N,
    hash: u64,
    push_new: impl FnOnce() -> u32,
) -> (u32, bool) {
    match table.entry(hash, |&(m, _)| m == n, |&(m, _)| number_hash(m.into())) {
        Entry::Occupied(e) => (e.get().1, false),
        Entry::Vacant(e) => {
            let next = push_new();
            e.insert((n, next));
            (next, true)
        }
    }
}

fn number_hash(n: u64) -> u64 {
    FxBuildHasher.hash_one(n)
}

/// Half of an id's hash, and the table hash made from it: the table takes its slot from the
/// low bits and its 7-bit tag from the high ones, so both halves carry the same 32 bits.
fn half_hash(id: &str) -> u32 {
    (FxBuildHasher.hash_one(id) >> 32) as u32
}

fn table_hash(half: u32) -> u64 {
    (half as u64) << 32 | half as u64
}

impl Interner {
    pub(super) fn new(numbers: Numbers) -> Self {
        Self {
            numbers,
            text: String::new(),
            ends: Vec::new(),
            slots: Vec::new(),
            implied: Vec::new(),
            narrow_numbers: HashTable::new(),
            wide_numbers: HashTable::new(),
            table: HashTable::new(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The id's text, where it is written (`None` for an implied number).
    pub(super) fn text(&self, i: u32) -> Option<&str> {
        (!bit_set(&self.implied, i))
            .then(|| written(&self.text, &self.ends, self.slots[i as usize]))
    }

    pub(super) fn get(&self, i: u32) -> Id<'_> {
        match self.text(i) {
            Some(text) => Id(Repr::Text(text)),
            None => Id::number(self.slots[i as usize]),
        }
    }

    pub(super) fn find(&self, id: &str) -> Option<u32> {
        if let Some(n) = canonical_number(id) {
            let hash = number_hash(n);
            return match u32::try_from(n) {
                Ok(narrow) => self.narrow_numbers.find(hash, |&(m, _)| m == narrow)?.1,
                Err(_) => self.wide_numbers.find(hash, |&(m, _)| m == n)?.1,
            }
            .into();
        }
        let half = half_hash(id);
        self.table
            .find(table_hash(half), |&(i, h)| {
                h == half && self.text(i) == Some(id)
            })
            .map(|&(i, _)| i)
    }

    /// The index of `id`, and whether it was new.
    pub(super) fn insert(&mut self, id: &str) -> (u32, bool) {
        if let Some(n) = canonical_number(id) {
            return self.insert_number(n);
        }
        let half = half_hash(id);
        let Self {
            text,
            ends,
            slots,
            table,
            ..
        } = self;
        // The table holds written ids only: their slots are places in `ends`.
        let entry = table.entry(
            table_hash(half),
            |&(i, h)| h == half && written(text, ends, slots[i as usize]) == id,
            |&(_, h)| table_hash(h),
        );
        match entry {
            Entry::Occupied(e) => (e.get().0, false),
            Entry::Vacant(e) => {
                let next = push_written(text, ends, slots, id);
                e.insert((next, half));
                (next, true)
            }
        }
    }

    /// The index of the id `n` writes in decimal, and whether it was new: a source's numbers
    /// are interned without text to read (an implied number has none to write). `n` is below
    /// 10^19, as [`crate::model::ChannelIds`] keeps its numbers, so that text is canonical.
    pub(super) fn insert_number(&mut self, n: u64) -> (u32, bool) {
        let Self {
            numbers,
            text,
            ends,
            slots,
            implied,
            narrow_numbers,
            wide_numbers,
            ..
        } = self;
        let hash = number_hash(n);
        let write = || push_written(text, ends, slots, itoa::Buffer::new().format(n));
        match u32::try_from(n) {
            Ok(narrow) if *numbers == Numbers::Implied => {
                interned_number(narrow_numbers, narrow, hash, || {
                    let next = slots.len() as u32;
                    slots.push(narrow);
                    set_bit(implied, next);
                    next
                })
            }
            Ok(narrow) => interned_number(narrow_numbers, narrow, hash, write),
            Err(_) => interned_number(wide_numbers, n, hash, write),
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = Id<'_>> {
        (0..self.len() as u32).map(|i| self.get(i))
    }
}

/// Appends a written id; its index.
fn push_written(text: &mut String, ends: &mut Vec<u32>, slots: &mut Vec<u32>, id: &str) -> u32 {
    let next = slots.len() as u32;
    slots.push(ends.len() as u32);
    text.push_str(id);
    ends.push(u32::try_from(text.len()).expect("under 4 GiB of ids per platform"));
    next
}

fn set_bit(bits: &mut Vec<u64>, i: u32) {
    let word = i as usize / 64;
    if bits.len() <= word {
        bits.resize(word + 1, 0);
    }
    bits[word] |= 1 << (i % 64);
}

#[cfg(test)]
mod tests {
    use super::{Interner, Numbers};

    #[test]
    fn numeric_and_other_ids_are_interned_apart_and_never_confused() {
        let ids = [
            "7",
            "007",
            "0",
            "00",
            "-7",
            "+7",
            "7 ",
            "",
            "9999999999999999999",
            "18446744073709551615",
            "99999999999999999999",
            "\u{661}",
            "onebot:7",
            "300000001",
            // Either side of 2^32, where numbers change tables; the wide one's number whose
            // low half is the narrow one's.
            "4294967295",
            "4294967296",
            "4294967297",
            "1",
        ];
        for numbers in [Numbers::Written, Numbers::Implied] {
            let mut interner = Interner::new(numbers);
            for (i, id) in ids.iter().enumerate() {
                assert_eq!(interner.insert(id), (i as u32, true), "{id:?}");
            }
            for (i, id) in ids.iter().enumerate() {
                assert_eq!(interner.insert(id), (i as u32, false), "{id:?}");
                assert_eq!(interner.find(id), Some(i as u32), "{id:?}");
                assert_eq!(interner.get(i as u32), *id);
            }
            assert_eq!(interner.find("07"), None);
            assert_eq!(interner.find("8"), None);
            // A number names the id its decimal text writes, whichever way it came in.
            assert_eq!(interner.insert_number(7), (0, false));
            assert_eq!(interner.insert_number(70), (ids.len() as u32, true));
            assert_eq!(interner.find("70"), Some(ids.len() as u32));
            assert_eq!(interner.get(ids.len() as u32), "70");
            let implied = (0..interner.len() as u32)
                .filter(|&i| interner.text(i).is_none())
                .count();
            // "7", "0", "300000001", "4294967295", "1" and "70" are the narrow numbers.
            let expected = if numbers == Numbers::Implied { 6 } else { 0 };
            assert_eq!(implied, expected);
        }
    }

    #[test]
    fn ids_sort_shorter_first_with_numbers_in_numeric_order() {
        let mut interner = Interner::new(Numbers::Implied);
        let ids = ["b", "10", "9", "aa", "300000001", "4294967295", "x1", "100"];
        for id in ids {
            interner.insert(id);
        }
        let mut order: Vec<u32> = (0..ids.len() as u32).collect();
        order.sort_by(|&a, &b| interner.get(a).cmp_shorter_first(&interner.get(b)));
        let sorted: Vec<String> = order.iter().map(|&i| interner.get(i).to_owned()).collect();
        let mut expected: Vec<&str> = ids.to_vec();
        expected.sort_by_key(|id| (id.len(), id.as_bytes().to_vec()));
        assert_eq!(sorted, expected);
    }
}
