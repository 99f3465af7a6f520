//! Where [`super::StateDb`]'s records live: bytes by table and key, in
//! redb on disk (what survives an agent restart) or in memory.

use super::StateError;
use redb::backends::InMemoryBackend;
use redb::{Database, StorageBackend, TableDefinition};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

/// The state's tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Table {
    Allocs,
    /// Keyed by `<alloc id>/<task name>`.
    Tasks,
}

impl Table {
    fn redb(self) -> TableDefinition<'static, &'static str, &'static [u8]> {
        match self {
            Table::Allocs => TableDefinition::new("allocs"),
            Table::Tasks => TableDefinition::new("tasks"),
        }
    }
}

/// Which records a removal takes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Removal<'a> {
    Key(&'a str),
    /// Every record whose key starts with it.
    Prefix(&'a str),
}

impl Removal<'_> {
    /// Where in key order the records it takes begin.
    fn first(&self) -> &str {
        match self {
            Removal::Key(key) | Removal::Prefix(key) => key,
        }
    }

    fn takes(&self, key: &str) -> bool {
        match self {
            Removal::Key(k) => key == *k,
            Removal::Prefix(prefix) => key.starts_with(prefix),
        }
    }
}

/// Records by table and key. Each insert, and each removal, is durable
/// once it returns, as far as the store keeps anything.
pub(super) trait Store: Send + Sync {
    fn insert(&self, table: Table, key: &str, bytes: &[u8]) -> Result<(), StateError>;
    /// Removes what each of `removals` names, all in one step.
    fn remove(&self, removals: &[(Table, Removal<'_>)]) -> Result<(), StateError>;
    fn get(&self, table: Table, key: &str) -> Result<Option<Vec<u8>>, StateError>;
    /// Every record whose key starts with `prefix`, in key order.
    fn scan(&self, table: Table, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StateError>;
}

/// Reads of a database file a copy makes at most, looking for two in a
/// row that agree; an agent commits far more slowly than a file is read.
const COPY_READS: usize = 8;

/// The data dir's database: each insert one committed transaction.
pub(super) struct RedbStore(Database);

impl RedbStore {
    pub(super) fn open(path: &Path) -> Result<Self, StateError> {
        Self::with_tables(Database::create(path), path)
    }

    /// The database at `path` as its file held it at one moment, in memory.
    pub(super) fn copy_of(path: &Path) -> Result<Self, StateError> {
        Self::copy_read_by(path, || std::fs::read(path))
    }

    /// [`RedbStore::copy_of`], the file's bytes coming from `read`. A read
    /// that overlaps a commit can hold pages of two states, which redb may
    /// fail on or panic on (`torn-state-copy`), so the file is read until
    /// two reads in a row agree: a state it held.
    fn copy_read_by(
        path: &Path,
        mut read: impl FnMut() -> std::io::Result<Vec<u8>>,
    ) -> Result<Self, StateError> {
        let copy_error = |source| StateError::Copy {
            path: path.to_path_buf(),
            source,
        };
        let mut last = read().map_err(copy_error)?;
        let mut reads = 1;
        let bytes = loop {
            if reads == COPY_READS {
                return Err(StateError::Unsettled {
                    path: path.to_path_buf(),
                    reads,
                });
            }
            let again = read().map_err(copy_error)?;
            reads += 1;
            if again == last {
                break again;
            }
            last = again;
        };
        let backend = InMemoryBackend::new();
        backend.set_len(bytes.len() as u64).map_err(copy_error)?;
        backend.write(0, &bytes).map_err(copy_error)?;
        Self::with_tables(Database::builder().create_with_backend(backend), path)
    }

    /// The database `opened` from `path`, with every table made.
    fn with_tables(
        opened: Result<Database, redb::DatabaseError>,
        path: &Path,
    ) -> Result<Self, StateError> {
        let db = opened.map_err(|source| match source {
            redb::DatabaseError::DatabaseAlreadyOpen => StateError::InUse {
                path: path.to_path_buf(),
            },
            source => StateError::Open {
                path: path.to_path_buf(),
                source,
            },
        })?;
        let tx = db.begin_write()?;
        tx.open_table(Table::Allocs.redb())?;
        tx.open_table(Table::Tasks.redb())?;
        tx.commit()?;
        Ok(RedbStore(db))
    }
}

impl Store for RedbStore {
    fn insert(&self, table: Table, key: &str, bytes: &[u8]) -> Result<(), StateError> {
        let tx = self.0.begin_write()?;
        tx.open_table(table.redb())?.insert(key, bytes)?;
        tx.commit()?;
        Ok(())
    }

    fn remove(&self, removals: &[(Table, Removal<'_>)]) -> Result<(), StateError> {
        let tx = self.0.begin_write()?;
        for (table, removal) in removals {
            (tx.open_table(table.redb())?)
                .retain_in(removal.first().., |key, _| !removal.takes(key))?;
        }
        tx.commit()?;
        Ok(())
    }

    fn get(&self, table: Table, key: &str) -> Result<Option<Vec<u8>>, StateError> {
        let tx = self.0.begin_read()?;
        let table = tx.open_table(table.redb())?;
        let value = table.get(key)?;
        Ok(value.map(|v| v.value().to_vec()))
    }

    fn scan(&self, table: Table, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StateError> {
        let tx = self.0.begin_read()?;
        let table = tx.open_table(table.redb())?;
        let mut out = Vec::new();
        for entry in table.range(prefix..)? {
            let (k, v) = entry?;
            if !k.value().starts_with(prefix) {
                break;
            }
            out.push((k.value().to_string(), v.value().to_vec()));
        }
        Ok(out)
    }
}

/// Records in memory, gone with the engine.
#[derive(Default)]
pub(super) struct MemoryStore(Mutex<BTreeMap<(Table, String), Vec<u8>>>);

impl MemoryStore {
    fn records(&self) -> std::sync::MutexGuard<'_, BTreeMap<(Table, String), Vec<u8>>> {
        crate::lock(&self.0)
    }
}

impl Store for MemoryStore {
    fn insert(&self, table: Table, key: &str, bytes: &[u8]) -> Result<(), StateError> {
        self.records()
            .insert((table, key.to_string()), bytes.to_vec());
        Ok(())
    }

    fn remove(&self, removals: &[(Table, Removal<'_>)]) -> Result<(), StateError> {
        let mut records = self.records();
        for (table, removal) in removals {
            records.retain(|(t, key), _| t != table || !removal.takes(key));
        }
        Ok(())
    }

    fn get(&self, table: Table, key: &str) -> Result<Option<Vec<u8>>, StateError> {
        Ok(self.records().get(&(table, key.to_string())).cloned())
    }

    fn scan(&self, table: Table, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StateError> {
        let records = self.records();
        Ok((records.range((table, prefix.to_string())..))
            .take_while(|((t, key), _)| *t == table && key.starts_with(prefix))
            .map(|((_, key), bytes)| (key.clone(), bytes.clone()))
            .collect())
    }
}

/// Each write a [`RecordingStore`] took, in the order made.
#[cfg(test)]
pub(super) type Writes = std::sync::Arc<Mutex<Vec<(Table, String, Vec<u8>)>>>;

/// Records in memory, each write also kept: what an agent killed right
/// after any one of them would restore.
#[cfg(test)]
#[derive(Default)]
pub(super) struct RecordingStore {
    records: MemoryStore,
    pub(super) writes: Writes,
}

#[cfg(test)]
impl Store for RecordingStore {
    fn insert(&self, table: Table, key: &str, bytes: &[u8]) -> Result<(), StateError> {
        (self.writes.lock().unwrap()).push((table, key.to_string(), bytes.to_vec()));
        self.records.insert(table, key, bytes)
    }

    fn remove(&self, removals: &[(Table, Removal<'_>)]) -> Result<(), StateError> {
        self.records.remove(removals)
    }

    fn get(&self, table: Table, key: &str) -> Result<Option<Vec<u8>>, StateError> {
        self.records.get(table, key)
    }

    fn scan(&self, table: Table, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StateError> {
        self.records.scan(table, prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database another process (here another open file) holds is
    /// named in use, the message saying by whom, not only redb's lock.
    #[test]
    fn a_database_held_elsewhere_is_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let _held = RedbStore::open(&path).unwrap();
        let second = RedbStore::open(&path).err().expect("opened twice");
        assert!(
            matches!(&second, StateError::InUse { path: p } if *p == path),
            "{second}"
        );
    }

    /// The allocs table of a database file's `bytes`, as a copy reads it.
    fn allocs_in(bytes: Vec<u8>) -> Vec<(String, Vec<u8>)> {
        let copy = RedbStore::copy_read_by(Path::new("state.db"), || Ok(bytes.clone()));
        copy.unwrap().scan(Table::Allocs, "").unwrap()
    }

    /// A copy read while an agent commits can hold pages of two states:
    /// the new header over the old pages. redb fails to open such a file,
    /// or opens it with records of neither state, or panics (which ended a
    /// `logs -f` with exit 101). The copy must be of a state the file held.
    #[test]
    fn a_copy_read_as_the_file_changed_is_of_a_state_it_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let disk = RedbStore::open(&path).unwrap();
        disk.insert(Table::Allocs, "a1", &[b'o'; 300]).unwrap();
        let before = std::fs::read(&path).unwrap();
        for key in ["a1", "a2", "a3"] {
            disk.insert(Table::Allocs, key, &[b'n'; 700]).unwrap();
        }
        let after = std::fs::read(&path).unwrap();
        drop(disk);
        let page = 4096.min(after.len());
        let mut torn = after[..page].to_vec();
        torn.extend_from_slice(&before[page.min(before.len())..]);
        assert_ne!(torn, after, "the splice must differ from the state after");
        let mut reads = [torn, after.clone(), after.clone()].into_iter();
        let copied = std::panic::catch_unwind(move || {
            let copy = RedbStore::copy_read_by(&path, || Ok(reads.next().expect("read")))?;
            copy.scan(Table::Allocs, "")
        });
        let expected = allocs_in(after);
        match copied {
            Ok(Ok(records)) if records == expected => {}
            other => panic!(
                "a torn read was opened: {:?}",
                other.map(|r| r.map(|records| records.len()))
            ),
        }
    }

    /// A file that differs at every read is no state it held: refused,
    /// named, after a bounded number of reads.
    #[test]
    fn a_file_that_never_reads_alike_twice_is_refused() {
        let mut read = 0u8;
        let copied = RedbStore::copy_read_by(Path::new("state.db"), || {
            read += 1;
            Ok(vec![read; 64])
        });
        assert!(
            matches!(
                copied,
                Err(StateError::Unsettled {
                    reads: COPY_READS,
                    ..
                })
            ),
            "{:?}",
            copied.err()
        );
        assert_eq!(usize::from(read), COPY_READS);
    }

    /// Both stores answer alike: what an engine on either reads back.
    #[test]
    fn the_memory_store_answers_as_the_database_does() {
        let dir = tempfile::tempdir().unwrap();
        let disk = RedbStore::open(&dir.path().join("state.db")).unwrap();
        let memory = MemoryStore::default();
        let stores: [&dyn Store; 2] = [&disk, &memory];
        for store in stores {
            store.insert(Table::Tasks, "a1/web", b"1").unwrap();
            store.insert(Table::Tasks, "a1/db", b"2").unwrap();
            store.insert(Table::Tasks, "a10/web", b"3").unwrap();
            store.insert(Table::Tasks, "a1/web", b"4").unwrap();
            store.insert(Table::Allocs, "a1/x", b"5").unwrap();
        }
        for table in [Table::Allocs, Table::Tasks] {
            for prefix in ["", "a1/", "a10/", "b"] {
                assert_eq!(
                    disk.scan(table, prefix).unwrap(),
                    memory.scan(table, prefix).unwrap(),
                    "{table:?} {prefix:?}"
                );
            }
            for key in ["a1/web", "a1/x", "nope"] {
                assert_eq!(
                    disk.get(table, key).unwrap(),
                    memory.get(table, key).unwrap()
                );
            }
        }
        assert_eq!(
            memory.scan(Table::Tasks, "a1/").unwrap(),
            [
                ("a1/db".to_string(), b"2".to_vec()),
                ("a1/web".to_string(), b"4".to_vec())
            ]
        );
    }

    /// A removal takes a key, and every key under a prefix, from either
    /// store alike, and no other: `a10/` is not under `a1/`.
    #[test]
    fn both_stores_remove_alike() {
        let dir = tempfile::tempdir().unwrap();
        let disk = RedbStore::open(&dir.path().join("state.db")).unwrap();
        let memory = MemoryStore::default();
        let stores: [&dyn Store; 2] = [&disk, &memory];
        for store in stores {
            for key in ["a1/web", "a1/db", "a10/web"] {
                store.insert(Table::Tasks, key, b"t").unwrap();
            }
            for key in ["a1", "a10"] {
                store.insert(Table::Allocs, key, b"a").unwrap();
            }
            store
                .remove(&[
                    (Table::Tasks, Removal::Prefix("a1/")),
                    (Table::Allocs, Removal::Key("a1")),
                ])
                .unwrap();
            let keys = |table| -> Vec<String> {
                (store.scan(table, "").unwrap().into_iter())
                    .map(|(k, _)| k)
                    .collect()
            };
            assert_eq!(keys(Table::Tasks), ["a10/web"]);
            assert_eq!(keys(Table::Allocs), ["a10"]);
        }
    }
}
