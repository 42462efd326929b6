//! Row partitions and halo index sets against the unsplit matrix, on seeded random patterns.
use std::collections::BTreeSet;

use autopcg_sparse::blocks::{default_row_costs, BlockSplit, RowPartition};
use autopcg_sparse::families::poisson3d_7pt;
use autopcg_sparse::CsrMatrix;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A random square matrix (any pattern, empty rows allowed) and a vector.
fn random_matrix(n: usize, density: f64, seed: u64) -> (CsrMatrix, Vec<f64>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut r, mut c, mut v) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        for j in 0..n {
            if rng.random::<f64>() < density {
                r.push(i as u32);
                c.push(j as u32);
                v.push(rng.random_range(-2.0..2.0));
            }
        }
    }
    let x = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
    (CsrMatrix::from_triplets(n, n, &r, &c, &v).unwrap(), x)
}

/// The multiply of a split: each block packs its send buffer, every message is delivered,
/// then each block multiplies its local and halo parts.
fn split_spmv(split: &BlockSplit, x: &[f64]) -> Vec<f64> {
    let xs = split.scatter(x);
    let sends: Vec<Vec<f64>> = split
        .blocks()
        .iter()
        .zip(&xs)
        .map(|(b, xl)| {
            let mut s = vec![f64::NAN; b.send_len()];
            b.pack(xl, &mut s);
            s
        })
        .collect();
    let mut halos: Vec<Vec<f64>> = split
        .blocks()
        .iter()
        .map(|b| vec![f64::NAN; b.halo_len()])
        .collect();
    for m in split.messages() {
        halos[m.to][m.halo_range.clone()].copy_from_slice(&sends[m.from][m.send_range.clone()]);
    }
    let ys: Vec<Vec<f64>> = split
        .blocks()
        .iter()
        .enumerate()
        .map(|(k, b)| {
            let mut y = vec![0.0; b.nrows()];
            b.spmv(&xs[k], &halos[k], &mut y);
            y
        })
        .collect();
    split.gather(&ys)
}

fn check_split(a: &CsrMatrix, split: &BlockSplit, x: &[f64]) -> Result<(), TestCaseError> {
    let p = split.partition();
    // Contiguous, non-empty, covering.
    prop_assert_eq!(p.starts()[0], 0);
    prop_assert_eq!(p.nrows(), a.nrows());
    for b in 0..p.nblocks() {
        prop_assert!(!p.range(b).is_empty());
        prop_assert_eq!(&split.blocks()[b].rows, &p.range(b));
    }
    // Every needed column fetched exactly once, nothing more, with its owner.
    let mut halo_total = 0;
    for (k, blk) in split.blocks().iter().enumerate() {
        let needed: BTreeSet<u32> = blk
            .rows
            .clone()
            .flat_map(|i| a.row(i).0.iter().copied())
            .filter(|&j| !blk.rows.contains(&(j as usize)))
            .collect();
        let got: Vec<u32> = blk.halo_cols.clone();
        prop_assert_eq!(
            got.len(),
            needed.len(),
            "block {} fetches a column twice",
            k
        );
        prop_assert_eq!(got.iter().copied().collect::<BTreeSet<_>>(), needed);
        // The receive lists tile the halo buffer, one per owner, owners ascending.
        let mut at = 0;
        let mut last_owner = None;
        for r in &blk.recvs {
            prop_assert_eq!(r.halo_range.start, at);
            prop_assert!(!r.halo_range.is_empty());
            prop_assert!(last_owner < Some(r.from));
            prop_assert!(r.from != k);
            for &c in &blk.halo_cols[r.halo_range.clone()] {
                prop_assert_eq!(p.owner(c as usize), r.from);
            }
            at = r.halo_range.end;
            last_owner = Some(r.from);
        }
        prop_assert_eq!(at, blk.halo_len());
        halo_total += blk.halo_len();
        // Parts hold exactly the block's entries.
        let row_nnz: usize = blk.rows.clone().map(|i| a.row_len(i)).sum();
        prop_assert_eq!(blk.local.nnz() + blk.halo.nnz(), row_nnz);
        prop_assert_eq!(blk.local.ncols(), blk.nrows());
        prop_assert_eq!(blk.halo.ncols(), blk.halo_len());
    }
    prop_assert_eq!(split.halo_entries(), halo_total);
    // Messages: one per (owner, receiver) pair, sends packed in the receiver's order.
    let mut moved = 0;
    for m in split.messages() {
        let sender = &split.blocks()[m.from];
        let receiver = &split.blocks()[m.to];
        let s = sender.sends.iter().find(|s| s.to == m.to).unwrap();
        prop_assert_eq!(&s.send_range, &m.send_range);
        prop_assert_eq!(m.len(), m.halo_range.len());
        for (&l, &c) in s
            .local
            .iter()
            .zip(&receiver.halo_cols[m.halo_range.clone()])
        {
            prop_assert_eq!(sender.rows.start + l as usize, c as usize);
        }
        moved += m.len();
    }
    prop_assert_eq!(moved, halo_total);
    for blk in split.blocks() {
        let mut at = 0;
        for s in &blk.sends {
            prop_assert_eq!(s.send_range.start, at);
            at = s.send_range.end;
        }
        prop_assert_eq!(at, blk.send_len());
    }
    // Local + halo SpMV equals the unsplit SpMV, bit for bit (same order of the sums).
    let y = a.mul_vec(x);
    let z = split_spmv(split, x);
    for i in 0..a.nrows() {
        prop_assert_eq!(
            y[i].to_bits(),
            z[i].to_bits(),
            "row {}: {} vs {}",
            i,
            y[i],
            z[i]
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn halo_sets_are_exact_and_the_split_multiplies_like_the_matrix(
        n in 1usize..60,
        density in 0.0f64..0.3,
        seed in any::<u64>(),
        nb in 1usize..8,
    ) {
        let (a, x) = random_matrix(n, density, seed);
        let nb = nb.min(n);
        let split = BlockSplit::by_default_costs(&a, nb).unwrap();
        prop_assert_eq!(split.partition().nblocks(), nb);
        check_split(&a, &split, &x)?;
    }

    #[test]
    fn partitions_cover_all_rows_and_balance_within_one_row(
        costs in prop::collection::vec(prop_oneof![Just(0.0f64), 0.0f64..100.0], 1..200),
        nb in 1usize..16,
    ) {
        let nb = nb.min(costs.len());
        let p = RowPartition::balanced(&costs, nb).unwrap();
        prop_assert_eq!(p.nblocks(), nb);
        prop_assert_eq!(p.nrows(), costs.len());
        for b in 0..nb {
            let r = p.range(b);
            prop_assert!(!r.is_empty());
            if b > 0 {
                prop_assert_eq!(r.start, p.range(b - 1).end);
            }
            for i in r.clone() {
                prop_assert_eq!(p.owner(i), b);
            }
        }
        let total: f64 = costs.iter().sum();
        let max = costs.iter().copied().fold(0.0, f64::max);
        let avg = total / nb as f64;
        for (b, c) in p.block_costs(&costs).into_iter().enumerate() {
            prop_assert!(c <= avg + max + 1e-9 * total, "block {} costs {} > {} + {}", b, c, avg, max);
        }
    }
}

#[test]
fn poisson_blocks_have_two_neighbours_and_planes_of_halo() {
    // 7-point Poisson on 8^3, 4 blocks of two planes each: inner blocks receive one plane from
    // each side.
    let a = poisson3d_7pt(8, 8, 8).unwrap();
    let split = BlockSplit::new(
        &a,
        RowPartition::from_starts(vec![0, 128, 256, 384, 512], 512).unwrap(),
    )
    .unwrap();
    let s = split.summary();
    assert_eq!(s[0].neighbours, vec![1]);
    assert_eq!(s[1].neighbours, vec![0, 2]);
    assert_eq!(s[1].halo_len, 128);
    assert_eq!(s[0].halo_len, 64);
    assert_eq!(split.halo_entries(), 64 + 128 + 128 + 64);
    // Equal rows and equal nonzeros per plane-pair, up to boundary rows: the default costs
    // split at the planes.
    let p = RowPartition::by_default_costs(&a, 4).unwrap();
    let costs = default_row_costs(&a);
    let bc = p.block_costs(&costs);
    let avg: f64 = bc.iter().sum::<f64>() / 4.0;
    for c in bc {
        assert!((c - avg).abs() <= 13.0, "{c} vs {avg}");
    }
}
