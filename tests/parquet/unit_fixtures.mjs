// Writes the Parquet files tests/unit/test_parquet.c reads: the same rows (every value a function
// of the row number, which the test computes again) through two independent writers, in every
// codec, page version and encoding they offer. Usage: node unit_fixtures.mjs OUTDIR
import { mkdirSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { brotliCompressSync, gzipSync } from 'node:zlib'

const require = createRequire(import.meta.url)
const npm = new URL('../npm/node_modules/', import.meta.url).pathname
const arrow = await import(join(npm, 'apache-arrow/Arrow.node.mjs'))
const pw = require(join(npm, 'parquet-wasm/node/parquet_wasm.js'))
const { parquetWriteBuffer } = await import(join(npm, 'hyparquet-writer/src/index.js'))

const out = process.argv[2]
if (!out) {
  console.error('usage: node unit_fixtures.mjs OUTDIR')
  process.exit(2)
}
mkdirSync(out, { recursive: true })

export const N = 3000
const rows = [...Array(N).keys()]
const M64 = (1n << 64n) - 1n

// The row functions; tests/unit/test_parquet.c has the same ones.
const col = {
  b: i => (i % 7 === 0 ? null : i % 3 === 0),
  i8: i => (i % 256) - 128,
  i16: i => ((i * 31) % 65536) - 32768,
  i32: i => (i % 5 === 3 ? null : i * 7 - 1000),
  i64: i => BigInt(i) * 1000000007n - 5n,
  u8: i => i % 256,
  u16: i => (i * 37) % 65536,
  u32: i => Number((BigInt(i) * 2654435761n) % (1n << 32n)),
  u64: i => (BigInt(i) * 11400714819323198485n) & M64,
  f32: i => i * 0.5 - 3,
  f64: i => i / 3,
  s: i => (i % 11 === 0 ? null : 'str' + (i % 50)),
  uniq: i => 'u' + i * i,
  bin: i => Uint8Array.from({ length: i % 5 }, (_, k) => (i + k) & 255),
  date: i => (i - 100) * 86400000, // milliseconds: Arrow stores i - 100 days
  ts: i => i, // milliseconds: Arrow stores i * 1000 microseconds
  lst: i => (i % 13 === 0 ? null : Array.from({ length: i % 4 }, (_, k) => i * 10 + k)),
  lsts: i => Array.from({ length: i % 3 }, (_, k) => 'e' + i + '_' + k),
}

function arrowTable() {
  const A = arrow
  const v = (name, type) => A.vectorFromArray(rows.map(col[name]), type)
  return new A.Table({
    b: v('b', new A.Bool()),
    i8: v('i8', new A.Int8()),
    i16: v('i16', new A.Int16()),
    i32: v('i32', new A.Int32()),
    i64: v('i64', new A.Int64()),
    u8: v('u8', new A.Uint8()),
    u16: v('u16', new A.Uint16()),
    u32: v('u32', new A.Uint32()),
    u64: v('u64', new A.Uint64()),
    f32: v('f32', new A.Float32()),
    f64: v('f64', new A.Float64()),
    s: v('s', new A.Utf8()),
    uniq: v('uniq', new A.Utf8()),
    bin: v('bin', new A.Binary()),
    date: v('date', new A.DateDay()),
    ts: v('ts', new A.TimestampMicrosecond()),
    lst: v('lst', new A.List(new A.Field('item', new A.Int32(), true))),
    lsts: v('lsts', new A.List(new A.Field('item', new A.Utf8(), false))),
  })
}

const ipc = arrow.tableToIPC(arrowTable(), 'stream')

function writePw(name, configure) {
  let b = new pw.WriterPropertiesBuilder()
  b = configure(b)
  const buf = pw.writeParquet(pw.Table.fromIPCStream(ipc), b.build())
  writeFileSync(join(out, name), buf)
}

const C = pw.Compression
for (const [cname, codec] of Object.entries({
  none: C.UNCOMPRESSED, snappy: C.SNAPPY, gzip: C.GZIP, brotli: C.BROTLI, zstd: C.ZSTD,
  lz4raw: C.LZ4_RAW,
})) {
  for (const [vname, ver] of Object.entries({ v1: pw.WriterVersion.V1, v2: pw.WriterVersion.V2 })) {
    writePw(`pw_${cname}_${vname}.parquet`, b =>
      b.setCompression(codec).setWriterVersion(ver).setMaxRowGroupSize(1000)
        .setDataPageSizeLimit(1024).setWriteBatchSize(100))
  }
}
// No dictionary: PLAIN everywhere.
writePw('pw_plain.parquet', b => b.setDictionaryEnabled(false).setCompression(C.SNAPPY))
// A dictionary that fills up: later pages of uniq fall back to PLAIN.
writePw('pw_fallback.parquet', b =>
  b.setDictionaryPageSizeLimit(2048).setDataPageSizeLimit(1024).setWriteBatchSize(100))
// The delta encodings and BYTE_STREAM_SPLIT, in both page versions.
for (const [vname, ver] of Object.entries({ v1: pw.WriterVersion.V1, v2: pw.WriterVersion.V2 })) {
  const E = pw.Encoding
  writePw(`pw_delta_${vname}.parquet`, b => {
    b = b.setDictionaryEnabled(false).setWriterVersion(ver).setDataPageSizeLimit(2048)
      .setWriteBatchSize(100).setCompression(C.ZSTD)
    for (const c of ['i8', 'i16', 'i32', 'i64', 'u8', 'u16', 'u32', 'u64', 'date', 'ts', 'lst.list.item'])
      b = b.setColumnEncoding(c, E.DELTA_BINARY_PACKED)
    b = b.setColumnEncoding('s', E.DELTA_LENGTH_BYTE_ARRAY)
    b = b.setColumnEncoding('bin', E.DELTA_LENGTH_BYTE_ARRAY)
    b = b.setColumnEncoding('uniq', E.DELTA_BYTE_ARRAY)
    b = b.setColumnEncoding('lsts.list.item', E.DELTA_BYTE_ARRAY)
    b = b.setColumnEncoding('f32', E.BYTE_STREAM_SPLIT)
    b = b.setColumnEncoding('f64', E.BYTE_STREAM_SPLIT)
    b = b.setColumnEncoding('b', E.RLE)
    return b
  })
}

// Columns the reader refuses or fails on: a struct, a list of lists, and a list holding a null.
{
  const A = arrow
  const int = () => new A.Field('item', new A.Int32(), true)
  const t = new A.Table({
    st: A.vectorFromArray([{ a: 1, b: 'x' }, { a: 2, b: 'y' }, { a: 3, b: 'z' }],
      new A.Struct([new A.Field('a', new A.Int32()), new A.Field('b', new A.Utf8())])),
    ll: A.vectorFromArray([[[1]], [], [[2, 3]]], new A.List(new A.Field('item', new A.List(int()), true))),
    ln: A.vectorFromArray([[1, 2], [3, null, 5], []], new A.List(int())),
    x: A.vectorFromArray([5, 6, 7], new A.Int32()),
  })
  writeFileSync(join(out, 'pw_nested.parquet'), pw.writeParquet(pw.Table.fromIPCStream(A.tableToIPC(t, 'stream'))))
}

// hyparquet-writer: DATA_PAGE_V2 pages, its own encoders, FLOAT16.
const half = i => (i % 9 === 0 ? null : i % 9 === 1 ? Infinity : i % 9 === 2 ? -0 : (i - 1500) / 64)
function writeHy(name, opts, encodings = {}) {
  const data = ['b', 'i32', 'i64', 'f32', 'f64', 's', 'uniq']
  const types = {
    b: 'BOOLEAN', i32: 'INT32', i64: 'INT64', f32: 'FLOAT', f64: 'DOUBLE', s: 'STRING',
    uniq: 'STRING',
  }
  const columnData = data.map(name => ({
    name, data: rows.map(col[name]), type: types[name], encoding: encodings[name],
  }))
  columnData.push({ name: 'f16', data: rows.map(half), type: 'FLOAT16' })
  const buf = parquetWriteBuffer({ columnData, rowGroupSize: 1000, pageSize: 2048, ...opts })
  writeFileSync(join(out, name), new Uint8Array(buf))
}
writeHy('hy_snappy.parquet', {})
writeHy('hy_none.parquet', { codec: 'UNCOMPRESSED' })
writeHy('hy_gzip.parquet', { codec: 'GZIP', compressors: { GZIP: b => gzipSync(b) } })
writeHy('hy_brotli.parquet', { codec: 'BROTLI', compressors: { BROTLI: b => brotliCompressSync(b) } })
writeHy('hy_delta.parquet', {}, {
  i32: 'DELTA_BINARY_PACKED', i64: 'DELTA_BINARY_PACKED',
  s: 'DELTA_LENGTH_BYTE_ARRAY', uniq: 'DELTA_BYTE_ARRAY', f32: 'BYTE_STREAM_SPLIT',
  f64: 'BYTE_STREAM_SPLIT', b: 'RLE',
})
