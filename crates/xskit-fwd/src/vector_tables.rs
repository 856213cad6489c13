//! The XDP filter's rule bit vectors in the kernel ([`crate::rule_vectors`]): the vectors (a
//! mapped array, stored a word at a time), every field's table of vector ids, the plain
//! fields' words and the trie of the rules' IPv6 prefixes, each twice: a table set in force,
//! and one the next rules are written in while packets use the first.

use std::collections::HashSet;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

use aya::maps::lpm_trie::{Key as TrieKey, LpmTrie};
use aya::maps::{Array, MapData};
use xskit::XdpProgram;

use crate::abi::{Field, FIELD_VALUES, PLAIN_FIELDS, PLAIN_WORDS};
use crate::error::{Error, Result};
use crate::rule_vectors::{RuleVector, RuleVectors};
use crate::sys::filter::{FieldTableRepr, PlainWordsRepr, RuleAddrRepr};

/// Words of a vector in `vectors`' memory.
const VECTOR_WORDS: usize = std::mem::size_of::<RuleVector>() / 8;

fn map_error(what: &'static str, e: impl std::error::Error) -> Error {
    Error::Filter {
        what,
        reason: xskit::error_chain(&e),
    }
}

/// For more than [`crate::abi::WORD_RULES`] rules, what `plain_words` holds: the ids of
/// [`RuleVectors::plain_ids`], side by side as the words are, so that the plain path finds
/// all nine with one lookup.
fn plain_ids(v: &RuleVectors, offset: u32) -> Box<PlainWordsRepr> {
    let mut words: Box<PlainWordsRepr> = vec![0u64; PLAIN_WORDS]
        .into_boxed_slice()
        .try_into()
        .unwrap_or_else(|_| unreachable!("PLAIN_WORDS entries"));
    for &field in &Field::ALL[..PLAIN_FIELDS] {
        let (at, to) = (field.base(), field.word_base());
        for value in 0..field.domain() {
            words[to + value] = u64::from(v.plain_ids[at + value] + offset);
        }
    }
    words
}

/// The vector tables of one loaded filter.
pub(crate) struct VectorTables {
    /// Vectors the filter was loaded with room for in each table set, and IPv6 rule
    /// prefixes.
    room: (usize, usize),
    /// Held for as long as its memory is mapped.
    _vectors_map: Array<MapData, RuleVector>,
    vectors: Option<xskit_os::Mmap>,
    ids: Array<MapData, FieldTableRepr>,
    words: Array<MapData, PlainWordsRepr>,
    /// Whether the filter has room for the fields' tables.
    tables: bool,
    trie: LpmTrie<MapData, RuleAddrRepr, u32>,
    /// Each table set's trie keys, so that a change removes those it no longer has.
    prefixes: [HashSet<(u32, RuleAddrRepr)>; 2],
}

impl VectorTables {
    /// The tables of `program`, loaded with room for `vectors` vectors and `prefixes` IPv6
    /// rule prefixes.
    pub(crate) fn take(program: &XdpProgram, vectors: usize, prefixes: usize) -> Result<Self> {
        let vectors_map: Array<MapData, RuleVector> = program.take_map("vectors")?;
        let memory = if vectors == 0 {
            None
        } else {
            let fd = aya::maps::IterableMap::map(&vectors_map).fd().as_fd();
            let bytes = 2 * vectors * std::mem::size_of::<RuleVector>();
            Some(
                xskit_os::Mmap::shared(fd, bytes, 0)
                    .map_err(|e| map_error("mapping the rule vectors", e))?,
            )
        };
        Ok(VectorTables {
            room: (vectors, prefixes),
            _vectors_map: vectors_map,
            vectors: memory,
            ids: program.take_map("field_ids")?,
            words: program.take_map("plain_words")?,
            tables: vectors > 0,
            trie: program.take_map("rule_trie")?,
            prefixes: [HashSet::new(), HashSet::new()],
        })
    }

    /// Writes `v` in table set `set` (0 or 1), which no packet may use meanwhile; returns
    /// the offset of its vector ids in the filter's vectors.
    pub(crate) fn write(&mut self, v: &RuleVectors, set: usize) -> Result<u32> {
        if v.vectors.len() > self.room.0 || v.trie_entries() > self.room.1 {
            return Err(Error::RulesOutgrown {
                wanted: format!(
                    "{} rule vectors and {} IPv6 rule prefixes",
                    v.vectors.len(),
                    v.trie_entries()
                ),
                room: format!(
                    "{} rule vectors and {} IPv6 rule prefixes",
                    self.room.0, self.room.1
                ),
            });
        }
        let offset = set * self.room.0;
        if let Some(memory) = &self.vectors {
            let words = &memory.words()[offset * VECTOR_WORDS..];
            for (i, vector) in v.vectors.iter().enumerate() {
                let at = &words[i * VECTOR_WORDS..(i + 1) * VECTOR_WORDS];
                at[0].store(vector.summary, Ordering::Relaxed);
                for (word, &bits) in at[1..].iter().zip(&vector.words) {
                    word.store(bits, Ordering::Relaxed);
                }
            }
        }
        let offset = u32::try_from(offset).unwrap_or(u32::MAX);
        if self.tables {
            self.write_fields(v, set as u32, offset)?;
        }
        self.write_trie(v, set, offset)?;
        Ok(offset)
    }

    /// Each field's table of vector ids, and the plain path's tables.
    fn write_fields(&mut self, v: &RuleVectors, set: u32, offset: u32) -> Result<()> {
        let mut table: Box<FieldTableRepr> = vec![0u32; FIELD_VALUES]
            .into_boxed_slice()
            .try_into()
            .unwrap_or_else(|_| unreachable!("FIELD_VALUES entries"));
        for &field in Field::ALL {
            let at = field.base();
            for (value, entry) in table.iter_mut().enumerate() {
                *entry = v.ids[at + value] + offset;
            }
            // Borrowed: a copy of the table would take a quarter of a MiB of the stack.
            #[allow(clippy::needless_borrows_for_generic_args)]
            self.ids
                .set(set * Field::ALL.len() as u32 + field as u32, &*table, 0)
                .map_err(|e| map_error("writing the rule vectors' tables", e))?;
        }
        let words = match <&PlainWordsRepr>::try_from(&*v.plain_words) {
            Ok(words) => words,
            Err(_) => &*plain_ids(v, offset),
        };
        self.words
            .set(set, words, 0)
            .map_err(|e| map_error("writing the plain path's words", e))?;
        Ok(())
    }

    /// Table set `set`'s trie prefixes become `v`'s.
    fn write_trie(&mut self, v: &RuleVectors, set: usize, offset: u32) -> Result<()> {
        let mut keep = HashSet::new();
        let source = 2 * set as u32;
        let fields = [(source, &v.src6), (source + 1, &v.dst6)];
        for (field, prefixes) in fields {
            for (net, len, id) in prefixes.entries() {
                let data = RuleAddrRepr {
                    field,
                    addr: net.to_be_bytes(),
                };
                let key = TrieKey::new(32 + u32::from(len), data);
                self.trie
                    .insert(&key, id + offset, 0)
                    .map_err(|e| map_error("writing the rules' IPv6 prefixes", e))?;
                keep.insert((key.prefix_len(), data));
            }
        }
        for &(len, data) in self.prefixes[set].difference(&keep) {
            self.trie
                .remove(&TrieKey::new(len, data))
                .map_err(|e| map_error("removing a rule's IPv6 prefix", e))?;
        }
        self.prefixes[set] = keep;
        Ok(())
    }
}
