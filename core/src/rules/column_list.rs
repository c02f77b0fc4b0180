//! Which columns the publications publish for a table: pgoutput's column
//! list rules, as a pure decision over the table's attributes and each
//! publication's column list (`pgoutput_column_list_init`,
//! `check_and_init_gencol` and `logicalrep_should_publish_column`).
//!
//! PostgreSQL 15–17 never publish generated columns, and a column list
//! naming every column counts as no list (15 counts every attribute,
//! dropped and generated ones too; 16 and 17 only live ones, so on 15 a
//! table with a dropped column never has a "full" list). PostgreSQL 18
//! publishes the
//! columns a list names (stored generated ones included) and, without a
//! list, stored generated columns when the publication says
//! `publish_generated_columns = stored`.

/// How an attribute's value is produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generated {
    No,
    Stored,
    Virtual,
}

/// One attribute of the published table (`pg_attribute`).
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub attnum: i16,
    pub dropped: bool,
    pub generated: Generated,
}

/// What one publication says about the table's columns.
#[derive(Debug, Clone, Default)]
pub struct PublicationColumns {
    /// The table's column list in this publication (attribute numbers);
    /// `None` for no list, FOR ALL TABLES and TABLES IN SCHEMA.
    pub list: Option<Vec<i16>>,
    /// `publish_generated_columns = stored` (PostgreSQL 18).
    pub generated_stored: bool,
}

/// Which server's rules apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rules {
    /// PostgreSQL 15.
    Pg15,
    /// PostgreSQL 16 and 17.
    Pg16To17,
    /// PostgreSQL 18.
    From18,
}

impl Rules {
    /// The rules of the server pubjson was built for.
    pub const fn current() -> Rules {
        if cfg!(feature = "pg18") {
            Rules::From18
        } else if cfg!(feature = "pg15") {
            Rules::Pg15
        } else {
            Rules::Pg16To17
        }
    }
}

/// The publications disagree: pgoutput's errors (SQLSTATE 0A000).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnListError {
    /// "cannot use different column lists for table ... in different publications"
    DifferentColumnLists,
    /// "cannot use different values of publish_generated_columns for table ..."
    DifferentGeneratedColumns,
}

/// Per attribute (in `columns` order): is it published?
pub fn published_columns(
    columns: &[Column],
    publications: &[PublicationColumns],
    rules: Rules,
) -> Result<Vec<bool>, ColumnListError> {
    match rules {
        Rules::Pg15 => published_up_to_17(columns, publications, columns.len()),
        Rules::Pg16To17 => {
            let live = columns
                .iter()
                .filter(|c| !c.dropped && c.generated == Generated::No)
                .count();
            published_up_to_17(columns, publications, live)
        }
        Rules::From18 => published_from_18(columns, publications),
    }
}

fn sorted(list: &[i16]) -> Vec<i16> {
    let mut set = list.to_vec();
    set.sort_unstable();
    set.dedup();
    set
}

/// `full_list`: how many columns a list names when it names them all.
fn published_up_to_17(
    columns: &[Column],
    publications: &[PublicationColumns],
    full_list: usize,
) -> Result<Vec<bool>, ColumnListError> {
    let live = |c: &Column| !c.dropped && c.generated == Generated::No;
    let mut chosen: Option<Option<Vec<i16>>> = None;
    for publication in publications {
        // A list naming every live column means "all columns".
        let set = publication
            .list
            .as_deref()
            .map(sorted)
            .filter(|set| set.len() != full_list);
        match &chosen {
            None => chosen = Some(set),
            Some(first) if *first != set => return Err(ColumnListError::DifferentColumnLists),
            Some(_) => {}
        }
    }
    let list = chosen.flatten();
    Ok(columns
        .iter()
        .map(|c| {
            live(c)
                && list
                    .as_ref()
                    .is_none_or(|l| l.binary_search(&c.attnum).is_ok())
        })
        .collect())
}

fn published_from_18(
    columns: &[Column],
    publications: &[PublicationColumns],
) -> Result<Vec<bool>, ColumnListError> {
    // check_and_init_gencol(): publications without a column list must agree
    // on publish_generated_columns, if the table has generated columns.
    let mut generated_stored = false;
    if columns.iter().any(|c| c.generated != Generated::No) {
        let mut first = None;
        for publication in publications.iter().filter(|p| p.list.is_none()) {
            match first {
                None => first = Some(publication.generated_stored),
                Some(value) if value != publication.generated_stored => {
                    return Err(ColumnListError::DifferentGeneratedColumns)
                }
                Some(_) => {}
            }
        }
        generated_stored = first.unwrap_or(false);
    }
    // Without a list, a publication publishes every column but generated
    // ones (stored ones too when asked to): pub_form_cols_map().
    let without_list = |c: &Column| {
        !c.dropped
            && match c.generated {
                Generated::No => true,
                Generated::Stored => generated_stored,
                Generated::Virtual => false,
            }
    };
    let all_columns: Vec<i16> = columns
        .iter()
        .filter(|c| without_list(c))
        .map(|c| c.attnum)
        .collect();
    let mut chosen: Option<Vec<i16>> = None;
    let mut any_list = false;
    for publication in publications {
        let set = match &publication.list {
            Some(list) => {
                any_list = true;
                sorted(list)
            }
            None => all_columns.clone(),
        };
        match &chosen {
            None => chosen = Some(set),
            Some(first) if *first != set => return Err(ColumnListError::DifferentColumnLists),
            Some(_) => {}
        }
    }
    Ok(match chosen.filter(|_| any_list) {
        Some(list) => columns
            .iter()
            .map(|c| !c.dropped && list.binary_search(&c.attnum).is_ok())
            .collect(),
        None => columns.iter().map(without_list).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(attnum: i16) -> Column {
        Column {
            attnum,
            dropped: false,
            generated: Generated::No,
        }
    }

    fn table() -> Vec<Column> {
        vec![
            col(1),
            Column {
                dropped: true,
                ..col(2)
            },
            col(3),
            Column {
                generated: Generated::Stored,
                ..col(4)
            },
        ]
    }

    fn list(attnums: &[i16]) -> PublicationColumns {
        PublicationColumns {
            list: Some(attnums.to_vec()),
            generated_stored: false,
        }
    }

    fn no_list(generated_stored: bool) -> PublicationColumns {
        PublicationColumns {
            list: None,
            generated_stored,
        }
    }

    const ALL: [Rules; 3] = [Rules::Pg15, Rules::Pg16To17, Rules::From18];

    #[test]
    fn without_lists_live_columns_are_published() {
        for rules in ALL {
            assert_eq!(
                published_columns(&table(), &[no_list(false)], rules),
                Ok(vec![true, false, true, false])
            );
        }
    }

    #[test]
    fn a_column_list_restricts() {
        for rules in ALL {
            assert_eq!(
                published_columns(&table(), &[list(&[3])], rules),
                Ok(vec![false, false, true, false])
            );
        }
    }

    #[test]
    fn full_list_and_no_list_agree() {
        // A list of every live column (dropped and generated ones do not
        // count) equals "no list": no error with a second publication...
        for rules in [Rules::Pg16To17, Rules::From18] {
            assert_eq!(
                published_columns(&table(), &[list(&[3, 1]), no_list(false)], rules),
                Ok(vec![true, false, true, false])
            );
        }
        // ...except on 15, which counts dropped and generated attributes.
        assert_eq!(
            published_columns(&table(), &[list(&[3, 1]), no_list(false)], Rules::Pg15),
            Err(ColumnListError::DifferentColumnLists)
        );
        let plain = [col(1), col(2)];
        assert_eq!(
            published_columns(&plain, &[list(&[2, 1]), no_list(false)], Rules::Pg15),
            Ok(vec![true, true])
        );
    }

    #[test]
    fn different_lists_are_an_error() {
        for rules in ALL {
            assert_eq!(
                published_columns(&table(), &[list(&[1]), no_list(false)], rules),
                Err(ColumnListError::DifferentColumnLists)
            );
            assert_eq!(
                published_columns(&table(), &[list(&[1]), list(&[3])], rules),
                Err(ColumnListError::DifferentColumnLists)
            );
        }
        assert_eq!(
            published_columns(&table(), &[list(&[1, 3]), list(&[3, 1, 1])], Rules::From18),
            Ok(vec![true, false, true, false])
        );
    }

    #[test]
    fn stored_generated_columns_from_18() {
        // publish_generated_columns = stored, no list.
        assert_eq!(
            published_columns(&table(), &[no_list(true)], Rules::From18),
            Ok(vec![true, false, true, true])
        );
        // Before 18 the option does not exist: never published.
        for rules in [Rules::Pg15, Rules::Pg16To17] {
            assert_eq!(
                published_columns(&table(), &[no_list(true)], rules),
                Ok(vec![true, false, true, false])
            );
        }
        // A list may name a stored generated column in 18.
        assert_eq!(
            published_columns(&table(), &[list(&[1, 4])], Rules::From18),
            Ok(vec![true, false, false, true])
        );
        // Publications without a list must agree on the option...
        assert_eq!(
            published_columns(&table(), &[no_list(true), no_list(false)], Rules::From18),
            Err(ColumnListError::DifferentGeneratedColumns)
        );
        // ...unless the table has no generated column.
        assert_eq!(
            published_columns(&[col(1)], &[no_list(true), no_list(false)], Rules::From18),
            Ok(vec![true])
        );
        // A list takes precedence over the option of its publication.
        assert_eq!(
            published_columns(&table(), &[list(&[1, 3, 4]), no_list(true)], Rules::From18),
            Ok(vec![true, false, true, true])
        );
    }

    #[test]
    fn virtual_generated_columns_are_never_published_without_a_list() {
        let columns = [
            col(1),
            Column {
                generated: Generated::Virtual,
                ..col(2)
            },
        ];
        assert_eq!(
            published_columns(&columns, &[no_list(true)], Rules::From18),
            Ok(vec![true, false])
        );
    }
}
