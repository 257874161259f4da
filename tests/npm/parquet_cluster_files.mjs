// Writes the Parquet files the cluster test reads, with hyparquet-writer (an independent
// writer): FILES files of GROUPS row groups of ROWS rows each, in OUTDIR, named
// part-NN.parquet. Row k of the whole set (counted over the files in name order) has
// id = k (INT64), name = "row-k" (STRING) and score = k / 4 (DOUBLE), null when k % 7 == 3.
//
//   node parquet_cluster_files.mjs OUTDIR FILES GROUPS ROWS
import { parquetWriteFile } from 'hyparquet-writer'
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'

const [outdir, files, groups, rows] = [process.argv[2], ...process.argv.slice(3).map(Number)]
if (!outdir || !(files > 0) || !(groups > 0) || !(rows > 0)) {
  console.error('usage: node parquet_cluster_files.mjs OUTDIR FILES GROUPS ROWS')
  process.exit(2)
}
mkdirSync(outdir, { recursive: true })
let k = 0
for (let f = 0; f < files; f++) {
  const n = groups * rows
  const ids = new Array(n)
  const names = new Array(n)
  const scores = new Array(n)
  for (let i = 0; i < n; i++, k++) {
    ids[i] = BigInt(k)
    names[i] = `row-${k}`
    scores[i] = k % 7 === 3 ? null : k / 4
  }
  parquetWriteFile({
    filename: join(outdir, `part-${String(f).padStart(2, '0')}.parquet`),
    columnData: [
      { name: 'id', data: ids, type: 'INT64', nullable: false },
      { name: 'name', data: names, type: 'STRING', nullable: false },
      { name: 'score', data: scores, type: 'DOUBLE' },
    ],
    rowGroupSize: rows,
  })
}
