//! A small aligned text table for the reports.

/// Rows of cells, printed with every column padded to its widest cell; the first column is
/// left-aligned, the others right-aligned (they are figures).
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Table {
            rows: vec![header.iter().map(|h| (*h).to_owned()).collect()],
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn print(&self) {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for (i, row) in self.rows.iter().enumerate() {
            let line: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(c, cell)| {
                    if c == 0 {
                        format!("{cell:<w$}", w = widths[c])
                    } else {
                        format!("{cell:>w$}", w = widths[c])
                    }
                })
                .collect();
            println!("  {}", line.join("   ").trim_end());
            if i == 0 {
                let total = widths.iter().sum::<usize>() + 3 * widths.len().saturating_sub(1);
                println!("  {}", "-".repeat(total));
            }
        }
    }
}

/// `12,345`
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A rate with a sensible number of digits.
pub fn rate(per_sec: f64) -> String {
    if per_sec >= 100.0 {
        thousands(per_sec.round() as u64)
    } else {
        format!("{per_sec:.1}")
    }
}

/// `0.42×`
pub fn ratio(part: f64, whole: f64) -> String {
    if whole > 0.0 {
        format!("{:.2}×", part / whole)
    } else {
        "-".to_owned()
    }
}
