// Writes the Parquet fixtures of tests/parquet/check.sh into OUTDIR, with two independent writers:
// parquet-wasm (the Rust arrow/parquet crates compiled to WebAssembly, fed apache-arrow tables)
// and hyparquet-writer. Each file comes with what `sluice run 'parquet("FILE")'` must print,
// computed by reading the file back with hyparquet (a third, independent reader), never from the
// values handed to the writer: a writer that silently changes a value changes the expectation
// with it, and the decoder is compared with what the file holds.
//
//   node tests/parquet/gen.mjs OUTDIR
//
// For every FILE.parquet in OUTDIR:
//   FILE.parquet.expected           every top-level column, one line per row, in file order; for
//                                   a file with nulls only the rows before the first null (the
//                                   run without defaults ends there with an error)
//   FILE.parquet.defaults.expected  (files with nullable columns) every column again, each
//                                   nullable one given a default: the manifest's defaultArgs
//   FILE.parquet.proj.expected      (files with two or more columns) the manifest's projArgs,
//                                   two columns in the reverse of their file order
// and OUTDIR/manifest.json lists every file: its columns, rows, row groups, writer, and the codec,
// encodings and data page versions found in the written file (not merely asked for). A setting
// a writer did not honour is an error here, so the coverage listed below cannot quietly shrink
// with a new writer version. OUTDIR/cases.txt is the same list for the shell, one file a line,
// fields split by '|' (empty ones kept): the file, the default args and the projection args
// (comma-separated), and the first null (column, row group, row in the file).
//
// The npm packages come from tests/npm/node_modules (scripts/deps.sh installs them there), or
// from the directory named by SLUICE_NPM_DIR.

import fs from 'node:fs'
import path from 'node:path'
import zlib from 'node:zlib'
import { createRequire } from 'node:module'
import { fileURLToPath, pathToFileURL } from 'node:url'

const here = path.dirname(fileURLToPath(import.meta.url))
const npmDir = process.env.SLUICE_NPM_DIR || path.join(here, '..', 'npm')
const requireFromNpm = createRequire(path.join(npmDir, 'package.json'))

async function load(name) {
  let file
  try {
    file = requireFromNpm.resolve(name)
  } catch (e) {
    throw new Error(`gen.mjs: npm package ${name} not found under ${npmDir}/node_modules ` +
      '(scripts/deps.sh installs it)')
  }
  const m = await import(pathToFileURL(file).href)
  // A CommonJS package (apache-arrow's node build, parquet-wasm's) arrives as its default export.
  return m.default && typeof m.default === 'object' ? m.default : m
}

const arrow = await load('apache-arrow')
const pw = await load('parquet-wasm/node')
const hyparquet = await load('hyparquet')
const { compressors: readCompressors } = await load('hyparquet-compressors')
const hw = await load('hyparquet-writer')
const { parquetHeader } = await load('hyparquet/src/column.js')

// ---- Deterministic values ---------------------------------------------------------------------

// mulberry32: small, seedable, the same sequence on every machine.
function rngFrom(seed) {
  let a = seed >>> 0
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  return {
    next,
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)), // inclusive
    big: (bits) => {
      let v = 0n
      for (let i = 0; i < bits; i += 16) v = (v << 16n) | BigInt(Math.floor(next() * 65536))
      return BigInt.asUintN(bits, v)
    },
    pick: (xs) => xs[Math.floor(next() * xs.length)],
  }
}

const f32 = Math.fround
const enc = new TextEncoder()
const bytes = (...xs) => new Uint8Array(xs)

// Half-precision bits to the number they spell (exact).
function halfToNumber(h) {
  const sign = h & 0x8000 ? -1 : 1
  const e = (h >> 10) & 0x1f
  const m = h & 0x3ff
  if (e === 0) return sign * m * 2 ** -24
  if (e === 31) return m ? NaN : sign * Infinity
  return sign * (1 + m / 1024) * 2 ** (e - 15)
}

const STRING_EDGES = ['', 'a', 'tab\there', 'line\nbreak', 'back\\slash', 'quote"d', '(1, 2)',
  '[x, y]', 'ünïcødé €', '\u0001\u007f', 'x'.repeat(300)].map((s) => enc.encode(s))
const BINARY_EDGES = [bytes(), bytes(0), bytes(0xff, 0x00, 0x80), bytes(0x5c, 0x0a, 0x09, 0x22),
  Uint8Array.from({ length: 256 }, (_, i) => i), bytes(0xc3, 0x28)]
const STRING_ALPHABET = [...'abcxyzABC019 ,.-_()[]', '\t', '\n', '\\', '"', 'é', '€', '\u0000',
  '\u007f']

function randomString(r, maxLen) {
  let s = ''
  const n = r.int(0, maxLen)
  for (let i = 0; i < n; i++) s += r.pick(STRING_ALPHABET)
  return enc.encode(s)
}

function randomBinary(r, maxLen) {
  return Uint8Array.from({ length: r.int(0, maxLen) }, () => r.int(0, 255))
}

// Every column kind the fixtures use. dtype is the sluice dtype the decoder must produce (see
// src/pipeline/parquet.h); edges are the first values of a column, then gen draws the rest;
// card (a small pool) makes a column repeat values, so a dictionary pays. Float32 values are
// rounded to float32 here so the two writers are handed the same numbers.
const KINDS = {
  bool: { dtype: 'bool', edges: [true, false], gen: (r) => r.next() < 0.5 },
  i8: { dtype: 'int8', edges: [-128, 127, 0, -1], gen: (r) => r.int(-128, 127) },
  i16: { dtype: 'int16', edges: [-32768, 32767, 0, -1], gen: (r) => r.int(-32768, 32767) },
  i32: { dtype: 'int32', edges: [-2147483648, 2147483647, 0, -1],
    gen: (r) => r.int(-2147483648, 2147483647) },
  i64: { dtype: 'int64', edges: [-(2n ** 63n), 2n ** 63n - 1n, 0n, -1n, 2n ** 53n + 1n],
    gen: (r) => BigInt.asIntN(64, r.big(64)) },
  u8: { dtype: 'uint8', edges: [0, 255, 128], gen: (r) => r.int(0, 255) },
  u16: { dtype: 'uint16', edges: [0, 65535, 32768], gen: (r) => r.int(0, 65535) },
  u32: { dtype: 'uint32', edges: [0, 4294967295, 2147483648], gen: (r) => r.int(0, 4294967295) },
  u64: { dtype: 'uint64', edges: [0n, 2n ** 64n - 1n, 2n ** 63n], gen: (r) => r.big(64) },
  f32: { dtype: 'float32',
    edges: [0, -0, NaN, Infinity, -Infinity, 3.4028234663852886e38, 1.401298464324817e-45,
      1.1754943508222875e-38, f32(0.1), 100, f32(1e-5), 306895232, 16777216, f32(-2.5e-7)],
    gen: (r) => f32((r.next() - 0.5) * 10 ** r.int(-8, 12)) },
  f64: { dtype: 'float64',
    edges: [0, -0, NaN, Infinity, -Infinity, 1e100, 0.1, 1e-5, 100, 5e-324,
      1.7976931348623157e308, 1e21, 123456789012345680, 0.30000000000000004,
      2.2250738585072014e-308],
    gen: (r) => (r.next() - 0.5) * 10 ** r.int(-20, 25) },
  // Half-precision values are kept as their bits; halfToNumber gives the writers' numbers.
  f16: { dtype: 'float32', edges: [0x0000, 0x8000, 0x7e00, 0x7c00, 0xfc00, 0x7bff, 0x0001, 0x03ff,
    0x2e66, 0x3c00], gen: (r) => r.int(0, 0xffff) },
  date: { dtype: 'int32', edges: [0, -1, -719162, 2932896, -2147483648, 2147483647],
    gen: (r) => r.int(-800000, 3000000) },
  ts_ms: { dtype: 'int64', edges: [0n, -1n, -(2n ** 63n), 2n ** 63n - 1n],
    gen: (r) => BigInt(r.int(-4e12, 4e12)) },
  ts_us: { dtype: 'int64', edges: [0n, 1n, -(2n ** 63n), 2n ** 63n - 1n],
    gen: (r) => BigInt(r.int(-4e12, 4e12)) * 1000n + BigInt(r.int(0, 999)) },
  ts_ns: { dtype: 'int64', edges: [0n, -1n, 2n ** 63n - 1n],
    gen: (r) => BigInt.asIntN(64, r.big(64)) },
  str: { dtype: 'bytes', edges: STRING_EDGES, gen: (r) => randomString(r, 24) },
  bin: { dtype: 'bytes', edges: BINARY_EDGES, gen: (r) => randomBinary(r, 16) },
  fsb: { dtype: 'bytes', width: 4, edges: [bytes(0, 0, 0, 0), bytes(255, 255, 255, 255),
    enc.encode('abcd'), bytes(0x0a, 0x09, 0x5c, 0x22)],
  gen: (r) => Uint8Array.from({ length: 4 }, () => r.int(0, 255)) },
  list_i32: { dtype: 'int32', list: 'i32',
    edges: [[], [-2147483648, 2147483647], [0], Array.from({ length: 60 }, (_, i) => i * i - 7)],
    gen: (r) => Array.from({ length: r.int(0, 6) }, () => KINDS.i32.gen(r)) },
  list_f64: { dtype: 'float64', list: 'f64', edges: [[NaN, -0, Infinity, -Infinity], [], [1e-300]],
    gen: (r) => Array.from({ length: r.int(0, 4) }, () => KINDS.f64.gen(r)) },
  list_str: { dtype: 'bytes', list: 'str', edges: [[], [enc.encode(''), enc.encode('a\nb')],
    [enc.encode('x\\y')]],
  gen: (r) => Array.from({ length: r.int(0, 3) }, () => randomString(r, 6)) },
  // A fixed-size list: three float32 a row (Parquet stores it as a LIST of three).
  fsl_f32: { dtype: 'float32', list: 'f32', fixed: 3, edges: [[0, -0, NaN], [Infinity, -1, 0.5]],
    gen: (r) => [0, 1, 2].map(() => KINDS.f32.gen(r)) },
}

// One column of n rows. opts: nullable (the schema allows nulls), nullRate (share of nulls),
// card (values drawn from a pool of this many, for dictionaries), edges (false: no edge values),
// sorted (integers ascending with small steps, the case delta encoding is made for), nullsFrom
// (no null before this row: the first null lands in a later row group).
function makeColumn(name, kind, n, seed, opts = {}) {
  const k = KINDS[kind]
  const r = rngFrom(seed)
  const pool = opts.card ? Array.from({ length: opts.card }, () => k.gen(r)) : null
  const values = []
  let acc = 0n
  for (let i = 0; i < n; i++) {
    let v
    if (opts.sorted && (kind === 'i32' || kind === 'i64')) {
      acc += BigInt(r.int(0, 40))
      v = kind === 'i32' ? Number(acc) - 1000000 : acc * 1000003n - 2n ** 40n
    } else if (opts.edges !== false && i < k.edges.length) {
      v = k.edges[i]
    } else {
      v = pool ? r.pick(pool) : k.gen(r)
    }
    if (opts.nullable && opts.nullRate && r.next() < opts.nullRate && i >= (opts.nullsFrom ?? 0)) {
      v = null
    }
    values.push(v)
  }
  return { name, kind, values, nullable: !!opts.nullable }
}

// The usual column set of a file: one column per kind, named for it.
function columnsOf(kinds, n, seed, opts = {}) {
  return kinds.map((kind, i) => makeColumn(kind, kind, n, seed * 1000 + i,
    typeof opts === 'function' ? opts(kind, i) : opts))
}

const ALL_KINDS = Object.keys(KINDS)
const NUMERIC_KINDS = ['i8', 'i16', 'i32', 'i64', 'u8', 'u16', 'u32', 'u64', 'f32', 'f64']
const FLOAT_KINDS = ['f32', 'f64', 'f16']

// ---- parquet-wasm (arrow-rs) ------------------------------------------------------------------

function arrowType(kind) {
  switch (kind) {
  case 'bool': return new arrow.Bool()
  case 'i8': return new arrow.Int8()
  case 'i16': return new arrow.Int16()
  case 'i32': return new arrow.Int32()
  case 'i64': return new arrow.Int64()
  case 'u8': return new arrow.Uint8()
  case 'u16': return new arrow.Uint16()
  case 'u32': return new arrow.Uint32()
  case 'u64': return new arrow.Uint64()
  case 'f32': return new arrow.Float32()
  case 'f64': return new arrow.Float64()
  case 'f16': return new arrow.Float16()
  case 'date': return new arrow.DateDay()
  case 'ts_ms': return new arrow.TimestampMillisecond()
  case 'ts_us': return new arrow.TimestampMicrosecond()
  case 'ts_ns': return new arrow.TimestampNanosecond()
  case 'str': return new arrow.Utf8()
  case 'bin': return new arrow.Binary()
  case 'fsb': return new arrow.FixedSizeBinary(4)
  default: {
    const k = KINDS[kind]
    // Item fields are nullable in lists and not in the fixed-size list: both Parquet shapes of a
    // list of a primitive (an optional and a required element) appear. No item is ever null.
    if (k.fixed) {
      return new arrow.FixedSizeList(k.fixed, new arrow.Field('item', arrowType(k.list), false))
    }
    return new arrow.List(new arrow.Field('item', arrowType(k.list), true))
  }
  }
}

function validity(values) {
  const nulls = values.filter((v) => v === null).length
  if (!nulls) return { nullCount: 0 }
  const bitmap = new Uint8Array(Math.ceil(values.length / 8))
  values.forEach((v, i) => { if (v !== null) bitmap[i >> 3] |= 1 << (i & 7) })
  return { nullCount: nulls, nullBitmap: bitmap }
}

// Builds the arrow Data of a column from its raw values (no conversion: a timestamp is the int64
// as given, a date the int32 days, a float16 its bits), nulls as a validity bitmap.
function arrowData(kind, values) {
  const type = arrowType(kind)
  const length = values.length
  const v = validity(values)
  const k = KINDS[kind]
  const fill = (Ctor, zero) => Ctor.from(values, (x) => (x === null ? zero : x))
  switch (kind) {
  case 'bool': {
    const data = new Uint8Array(Math.ceil(length / 8))
    values.forEach((x, i) => { if (x) data[i >> 3] |= 1 << (i & 7) })
    return arrow.makeData({ type, length, ...v, data })
  }
  case 'i8': return arrow.makeData({ type, length, ...v, data: fill(Int8Array, 0) })
  case 'i16': return arrow.makeData({ type, length, ...v, data: fill(Int16Array, 0) })
  case 'i32': case 'date': return arrow.makeData({ type, length, ...v, data: fill(Int32Array, 0) })
  case 'i64': case 'ts_ms': case 'ts_us': case 'ts_ns':
    return arrow.makeData({ type, length, ...v, data: fill(BigInt64Array, 0n) })
  case 'u8': return arrow.makeData({ type, length, ...v, data: fill(Uint8Array, 0) })
  case 'u16': return arrow.makeData({ type, length, ...v, data: fill(Uint16Array, 0) })
  case 'u32': return arrow.makeData({ type, length, ...v, data: fill(Uint32Array, 0) })
  case 'u64': return arrow.makeData({ type, length, ...v, data: fill(BigUint64Array, 0n) })
  case 'f32': return arrow.makeData({ type, length, ...v, data: fill(Float32Array, 0) })
  case 'f64': return arrow.makeData({ type, length, ...v, data: fill(Float64Array, 0) })
  case 'f16': return arrow.makeData({ type, length, ...v, data: fill(Uint16Array, 0) })
  case 'str': case 'bin': {
    const valueOffsets = new Int32Array(length + 1)
    let total = 0
    values.forEach((x, i) => { total += x ? x.length : 0; valueOffsets[i + 1] = total })
    const data = new Uint8Array(total)
    values.forEach((x, i) => { if (x) data.set(x, valueOffsets[i]) })
    return arrow.makeData({ type, length, ...v, valueOffsets, data })
  }
  case 'fsb': {
    const data = new Uint8Array(length * 4)
    values.forEach((x, i) => { if (x) data.set(x, i * 4) })
    return arrow.makeData({ type, length, ...v, data })
  }
  default: {
    if (k.fixed) {
      const flat = values.flatMap((x) => x ?? new Array(k.fixed).fill(0))
      return arrow.makeData({ type, length, ...v, child: arrowData(k.list, flat) })
    }
    const valueOffsets = new Int32Array(length + 1)
    const flat = []
    values.forEach((x, i) => { if (x) flat.push(...x); valueOffsets[i + 1] = flat.length })
    return arrow.makeData({ type, length, ...v, valueOffsets, child: arrowData(k.list, flat) })
  }
  }
}

function writeWithParquetWasm(columns, settings) {
  const fields = columns.map((c) => new arrow.Field(c.name, arrowType(c.kind), c.nullable))
  const schema = new arrow.Schema(fields)
  const n = columns.length ? columns[0].values.length : 0
  const struct = arrow.makeData({ type: new arrow.Struct(fields), length: n, nullCount: 0,
    children: columns.map((c) => arrowData(c.kind, c.values)) })
  const table = new arrow.Table([new arrow.RecordBatch(schema, struct)])
  let b = new pw.WriterPropertiesBuilder()
    .setWriterVersion(settings.pageVersion === 2 ? pw.WriterVersion.V2 : pw.WriterVersion.V1)
    .setCompression(pw.Compression[settings.codec])
    .setDictionaryEnabled(settings.dictionary !== false)
  if (settings.dictionaryPageSizeLimit) {
    b = b.setDictionaryPageSizeLimit(settings.dictionaryPageSizeLimit)
  }
  if (settings.dataPageSizeLimit) b = b.setDataPageSizeLimit(settings.dataPageSizeLimit)
  if (settings.writeBatchSize) b = b.setWriteBatchSize(settings.writeBatchSize)
  if (settings.rowGroupSize) b = b.setMaxRowGroupSize(settings.rowGroupSize)
  for (const [col, e] of Object.entries(settings.columnEncoding || {})) {
    // A column's non-dictionary encoding is honoured only with its dictionary off.
    b = b.setColumnDictionaryEnabled(col, false).setColumnEncoding(col, pw.Encoding[e])
  }
  const wasmTable = pw.Table.fromIPCStream(arrow.tableToIPC(table, 'stream'))
  return pw.writeParquet(wasmTable, b.build())
}

// ---- hyparquet-writer -------------------------------------------------------------------------

// hyparquet-writer compresses with functions it is given (snappy built in). GZIP and BROTLI come
// from node's zlib. ZSTD and LZ4_RAW have no compressor in node 20, so these two are written
// here in their simplest valid form: a zstd frame of raw (stored) blocks, and an LZ4 block that
// is one run of literals. They are legal streams every decoder must accept; real compressed
// zstd and LZ4_RAW pages come from parquet-wasm.
function zstdStored(data) {
  const out = [0x28, 0xb5, 0x2f, 0xfd, 0xa0] // magic; single segment, 4-byte content size
  const n = data.length
  out.push(n & 255, (n >>> 8) & 255, (n >>> 16) & 255, (n >>> 24) & 255)
  let off = 0
  do {
    const size = Math.min(n - off, 1 << 17)
    const last = off + size === n ? 1 : 0
    const header = (size << 3) | last // block type 0: raw
    out.push(header & 255, (header >>> 8) & 255, (header >>> 16) & 255)
    for (let i = 0; i < size; i++) out.push(data[off + i])
    off += size
  } while (off < n)
  return new Uint8Array(out)
}

function lz4Literals(data) {
  const out = []
  const n = data.length
  out.push((n >= 15 ? 15 : n) << 4)
  if (n >= 15) {
    let rest = n - 15
    while (rest >= 255) { out.push(255); rest -= 255 }
    out.push(rest)
  }
  for (const x of data) out.push(x)
  return new Uint8Array(out)
}

const HW_COMPRESSORS = {
  GZIP: (d) => new Uint8Array(zlib.gzipSync(d)),
  BROTLI: (d) => new Uint8Array(zlib.brotliCompressSync(d)),
  ZSTD: zstdStored,
  LZ4_RAW: lz4Literals,
}

function hwLeaf(kind, name, repetition) {
  const e = { name, repetition_type: repetition }
  switch (kind) {
  case 'bool': return { ...e, type: 'BOOLEAN' }
  case 'i8': return { ...e, type: 'INT32', converted_type: 'INT_8' }
  // The logical type alone (no converted type) for one width: a reader must read either.
  case 'i16': return { ...e, type: 'INT32',
    logical_type: { type: 'INTEGER', bitWidth: 16, isSigned: true } }
  case 'i32': return { ...e, type: 'INT32' }
  case 'i64': return { ...e, type: 'INT64' }
  case 'u8': return { ...e, type: 'INT32', converted_type: 'UINT_8' }
  case 'u16': return { ...e, type: 'INT32',
    logical_type: { type: 'INTEGER', bitWidth: 16, isSigned: false } }
  case 'u32': return { ...e, type: 'INT32', converted_type: 'UINT_32' }
  case 'u64': return { ...e, type: 'INT64', converted_type: 'UINT_64' }
  case 'f32': return { ...e, type: 'FLOAT' }
  case 'f64': return { ...e, type: 'DOUBLE' }
  case 'f16': return { ...e, type: 'FIXED_LEN_BYTE_ARRAY', type_length: 2,
    logical_type: { type: 'FLOAT16' } }
  case 'date': return { ...e, type: 'INT32', converted_type: 'DATE' }
  case 'ts_ms': return { ...e, type: 'INT64', converted_type: 'TIMESTAMP_MILLIS' }
  case 'ts_us': return { ...e, type: 'INT64',
    logical_type: { type: 'TIMESTAMP', isAdjustedToUTC: true, unit: 'MICROS' } }
  case 'ts_ns': return { ...e, type: 'INT64',
    logical_type: { type: 'TIMESTAMP', isAdjustedToUTC: false, unit: 'NANOS' } }
  case 'str': return { ...e, type: 'BYTE_ARRAY', converted_type: 'UTF8' }
  case 'bin': return { ...e, type: 'BYTE_ARRAY' }
  case 'fsb': return { ...e, type: 'FIXED_LEN_BYTE_ARRAY', type_length: 4 }
  default: throw new Error(`no hyparquet-writer leaf for ${kind}`)
  }
}

// hyparquet-writer is handed numbers, bigints and byte arrays; a float16 its number, a DATE its
// days, a timestamp its int64 (both written as given).
function hwValue(kind, v) {
  if (v === null) return null
  if (kind === 'f16') return halfToNumber(v)
  return v
}

function writeWithHyparquetWriter(columns, settings) {
  const schema = [{ name: 'root', num_children: columns.length }]
  const columnData = []
  for (const c of columns) {
    const k = KINDS[c.kind]
    const rep = c.nullable ? 'OPTIONAL' : 'REQUIRED'
    if (k.list) {
      schema.push({ name: c.name, repetition_type: rep, converted_type: 'LIST', num_children: 1 },
        { name: 'list', repetition_type: 'REPEATED', num_children: 1 },
        hwLeaf(k.list, 'element', 'REQUIRED'))
    } else {
      schema.push(hwLeaf(c.kind, c.name, rep))
    }
    const data = k.list
      ? c.values.map((x) => (x === null ? null : x.map((y) => hwValue(k.list, y))))
      : c.values.map((x) => hwValue(c.kind, x))
    const cd = { name: c.name, data }
    const e = settings.columnEncoding?.[c.name] ?? settings.encoding
    if (e) cd.encoding = e
    if (settings.columnCodec?.[c.name]) cd.codec = settings.columnCodec[c.name]
    columnData.push(cd)
  }
  const ab = hw.parquetWriteBuffer({
    columnData, schema,
    codec: settings.codec,
    compressors: HW_COMPRESSORS,
    pageSize: settings.dataPageSizeLimit,
    rowGroupSize: settings.rowGroupSize,
    dictionarySize: settings.dictionarySize,
  })
  return new Uint8Array(ab)
}

// ---- What the file holds (hyparquet) ----------------------------------------------------------

// The sluice dtype of a leaf schema element: the mapping of src/pipeline/parquet.h.
function dtypeOf(el) {
  const lt = el.logical_type
  const ct = el.converted_type
  switch (el.type) {
  case 'BOOLEAN': return 'bool'
  case 'INT32': {
    if (lt?.type === 'INTEGER') {
      const w = lt.bitWidth
      return (lt.isSigned ? 'int' : 'uint') + w
    }
    const m = { INT_8: 'int8', INT_16: 'int16', INT_32: 'int32', UINT_8: 'uint8', UINT_16: 'uint16',
      UINT_32: 'uint32' }
    return m[ct] ?? 'int32'
  }
  case 'INT64':
    if ((lt?.type === 'INTEGER' && !lt.isSigned) || ct === 'UINT_64') return 'uint64'
    return 'int64'
  case 'FLOAT': return 'float32'
  case 'DOUBLE': return 'float64'
  case 'FIXED_LEN_BYTE_ARRAY':
    if (lt?.type === 'FLOAT16') return 'float32'
    return 'bytes'
  case 'BYTE_ARRAY': return 'bytes'
  default: throw new Error(`no sluice dtype for ${el.type}`)
  }
}

// Top-level columns of a file: name, leaf element, dtype, list, optional.
function topColumns(metadata) {
  const tree = hyparquet.parquetSchema(metadata)
  return tree.children.map((node) => {
    let leaf = node
    while (leaf.children.length) leaf = leaf.children[0]
    return {
      name: node.element.name,
      dtype: dtypeOf(leaf.element),
      list: node !== leaf,
      optional: node.element.repetition_type === 'OPTIONAL',
    }
  })
}

// Reads every row back. The parsers keep what the file stores: a DATE its int32 days, a
// TIMESTAMP its int64 (hyparquet would make a Date, losing sub-millisecond digits), strings
// their bytes (hyparquet would decode UTF-8, losing invalid sequences); utf8: false keeps plain
// BYTE_ARRAY as bytes too.
async function readBack(buf) {
  const ab = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength)
  const metadata = hyparquet.parquetMetadata(ab)
  const same = (x) => x
  const rows = Number(metadata.num_rows) === 0 ? [] : await hyparquet.parquetReadObjects({
    file: ab, metadata, compressors: readCompressors, utf8: false,
    parsers: { timestampFromMilliseconds: same, timestampFromMicroseconds: same,
      timestampFromNanoseconds: same, dateFromDays: same, stringFromBytes: same },
  })
  return { metadata, rows }
}

// Walks every page of every column chunk (headers only) for what the writer really did: the
// codec, the data page versions and encodings, the dictionary pages, the pages per chunk.
function inspect(buf, metadata) {
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength)
  const out = { codecs: new Set(), pageVersions: new Set(), encodings: {}, dictionaryPages: 0,
    maxPagesPerChunk: 0, fallbackColumns: new Set(), rowGroups: metadata.row_groups.length }
  for (const rg of metadata.row_groups) {
    for (const cc of rg.columns) {
      const md = cc.meta_data
      const col = md.path_in_schema[0]
      out.codecs.add(md.codec)
      out.encodings[col] ??= new Set()
      let off = Number(md.dictionary_page_offset ?? md.data_page_offset)
      if (md.dictionary_page_offset !== undefined && Number(md.dictionary_page_offset) === 0) {
        off = Number(md.data_page_offset) // some writers put 0 for "none"
      }
      const end = off + Number(md.total_compressed_size)
      let pages = 0
      const chunkEncodings = new Set()
      while (off < end) {
        const reader = { view, offset: off }
        const h = parquetHeader(reader)
        off = reader.offset + h.compressed_page_size
        if (h.type === 'DICTIONARY_PAGE') { out.dictionaryPages++; continue }
        pages++
        if (h.type === 'DATA_PAGE') {
          out.pageVersions.add(1)
          chunkEncodings.add(h.data_page_header.encoding)
        } else if (h.type === 'DATA_PAGE_V2') {
          out.pageVersions.add(2)
          chunkEncodings.add(h.data_page_header_v2.encoding)
        }
      }
      for (const e of chunkEncodings) out.encodings[col].add(e)
      const dict = [...chunkEncodings].some((e) => e.endsWith('_DICTIONARY'))
      if (dict && chunkEncodings.size > 1) out.fallbackColumns.add(col)
      out.maxPagesPerChunk = Math.max(out.maxPagesPerChunk, pages)
    }
  }
  return out
}

// ---- The text format (src/pipeline/format.c) --------------------------------------------------

// The exact decimal expansion of a finite nonzero double: digits s (no trailing zeros) and the
// decimal exponent X of its first digit.
function exactDecimal(v) {
  const dv = new DataView(new ArrayBuffer(8))
  dv.setFloat64(0, Math.abs(v))
  const bits = dv.getBigUint64(0)
  const be = Number((bits >> 52n) & 0x7ffn)
  let m = bits & ((1n << 52n) - 1n)
  let e2 = -1074
  if (be !== 0) { m |= 1n << 52n; e2 = be - 1075 }
  let D
  let k
  if (e2 >= 0) { D = m << BigInt(e2); k = 0 } else { D = m * 5n ** BigInt(-e2); k = e2 }
  let s = D.toString()
  const X = s.length - 1 + k
  s = s.replace(/0+$/, '')
  return { s, X }
}

// printf("%.*g", p, v) for a finite double, as glibc prints it: the exact value rounded to p
// significant digits, ties to even.
function fmtG(v, p) {
  if (v === 0) return Object.is(v, -0) ? '-0' : '0'
  const sign = v < 0 ? '-' : ''
  let { s, X } = exactDecimal(v)
  if (s.length <= p) {
    s = s.padEnd(p, '0')
  } else {
    let head = s.slice(0, p)
    const rest = s.slice(p)
    const above = rest[0] > '5' || (rest[0] === '5' && /[1-9]/.test(rest.slice(1)))
    const tie = rest[0] === '5' && !/[1-9]/.test(rest.slice(1))
    if (above || (tie && Number(head[head.length - 1]) % 2 === 1)) {
      head = (BigInt(head) + 1n).toString()
      if (head.length > p) { head = head.slice(0, p); X += 1 }
    }
    s = head
  }
  const trim = (t) => (t.includes('.') ? t.replace(/0+$/, '').replace(/\.$/, '') : t)
  if (X < -4 || X >= p) {
    const mant = trim(s[0] + '.' + s.slice(1))
    return sign + mant + 'e' + (X < 0 ? '-' : '+') + String(Math.abs(X)).padStart(2, '0')
  }
  if (X >= 0) return sign + trim(s.slice(0, X + 1) + '.' + s.slice(X + 1))
  return sign + trim('0.' + '0'.repeat(-X - 1) + s)
}

// The float32 values next to f (positive, finite), as doubles; above FLT_MAX, 2^128.
function f32Step(f, up) {
  const dv = new DataView(new ArrayBuffer(4))
  dv.setFloat32(0, f)
  const b = dv.getUint32(0)
  if (up && b === 0x7f7fffff) return 2 ** 128
  dv.setUint32(0, up ? b + 1 : b - 1)
  return dv.getFloat32(0)
}

// Compares the decimal text t (unsigned) with the double d exactly: -1, 0 or 1.
function cmpDecimal(t, d) {
  const [mant, exp = '0'] = t.split('e')
  const [ip, fp = ''] = mant.split('.')
  const D = BigInt(ip + fp)
  const k = Number(exp) - fp.length
  const dv = new DataView(new ArrayBuffer(8))
  dv.setFloat64(0, d)
  const bits = dv.getBigUint64(0)
  const be = Number((bits >> 52n) & 0x7ffn)
  let m = bits & ((1n << 52n) - 1n)
  let e2 = -1074
  if (be !== 0) { m |= 1n << 52n; e2 = be - 1075 }
  let L = D
  let R = m
  if (k >= 0) L *= 10n ** BigInt(k); else R *= 10n ** BigInt(-k)
  if (e2 >= 0) R *= 1n << BigInt(e2); else L *= 1n << BigInt(-e2)
  return L < R ? -1 : L > R ? 1 : 0
}

// strtof(t) for the shortest-text search: the float32 nearest the decimal t, exactly. Rounding
// through a double (Math.fround(Number(t))) is wrong only when the double lands exactly on a
// midpoint between two floats, so there the text is compared with the midpoint exactly.
function strtof(t) {
  const neg = t[0] === '-'
  const u = neg ? t.slice(1) : t
  const d = Number(u)
  let f = f32(d)
  if (d !== 0 && Number.isFinite(d) && f !== d) {
    const lo = f < d ? f : f32Step(f, false)
    const hi = f < d ? f32Step(f === Infinity ? 3.4028234663852886e38 : f, true) : f
    if ((lo + hi) / 2 === d) {
      const c = cmpDecimal(u, d)
      if (c !== 0) f = c > 0 ? (hi === 2 ** 128 ? Infinity : hi) : lo
    }
  }
  return neg ? -f : f
}

// pipe_format_f64 / pipe_format_f32: the fewest significant digits that read back, then the
// fixed notation when it spells the same digits followed by zeros.
function shortest(v, isF32) {
  if (Number.isNaN(v)) return 'nan'
  if (v === Infinity) return 'inf'
  if (v === -Infinity) return '-inf'
  const maxp = isF32 ? 9 : 17
  const back = (t) => (isF32 ? strtof(t) === v : Number(t) === v)
  let p = 1
  let buf
  for (; p <= maxp; p++) {
    buf = fmtG(v, p)
    if (p === maxp || back(buf)) break
  }
  const ei = buf.indexOf('e')
  if (ei >= 0) {
    const x = Number(buf.slice(ei + 1))
    if (x >= -4 && x < maxp) {
      const fixed = fmtG(v, x + 1)
      const m = fixed.length
      let zeros = m > 0 && m < 32 && m >= x + 1 - p
      for (let i = m - (x + 1 - p); zeros && i < m; i++) zeros = fixed[i] === '0'
      if (zeros && back(fixed)) buf = fixed
    }
  }
  return buf
}

function escapeBytes(b) {
  let s = ''
  for (const c of b) {
    if (c === 0x5c) s += '\\\\'
    else if (c === 0x0a) s += '\\n'
    else if (c === 0x09) s += '\\t'
    else if (c < 0x20 || c > 0x7e) s += '\\x' + c.toString(16).padStart(2, '0')
    else s += String.fromCharCode(c)
  }
  return s
}

function fmtScalar(dtype, v, where) {
  switch (dtype) {
  case 'bool':
    if (typeof v !== 'boolean') break
    return v ? 'true' : 'false'
  case 'int8': case 'int16': case 'int32': case 'uint8': case 'uint16':
    if (typeof v !== 'number' || !Number.isInteger(v)) break
    return String(v)
  case 'uint32':
    if (typeof v !== 'number' || !Number.isInteger(v)) break
    return String(v >>> 0)
  // hyparquet gives a nullable UINT_64 column's values as signed bigints: the same 64 bits.
  case 'int64':
    if (typeof v !== 'bigint') break
    return BigInt.asIntN(64, v).toString()
  case 'uint64':
    if (typeof v !== 'bigint') break
    return BigInt.asUintN(64, v).toString()
  case 'float32':
    if (typeof v !== 'number' || (f32(v) !== v && !Number.isNaN(v))) break
    return shortest(v, true)
  case 'float64':
    if (typeof v !== 'number') break
    return shortest(v, false)
  case 'bytes':
    if (!(v instanceof Uint8Array)) break
    return escapeBytes(v)
  }
  throw new Error(`${where}: hyparquet gave ${typeof v} ${String(v)} for a ${dtype} value`)
}

// The text of one column's value in one row; null stays null (the caller decides).
function fmtCell(col, v, where) {
  if (v === null || v === undefined) return null
  if (!col.list) return fmtScalar(col.dtype, v, where)
  if (!Array.isArray(v)) throw new Error(`${where}: hyparquet gave no array for a list`)
  return '[' + v.map((x) => {
    if (x === null || x === undefined) throw new Error(`${where}: a null list item`)
    return fmtScalar(col.dtype, x, where)
  }).join(', ') + ']'
}

function fmtRow(cells) {
  return cells.length === 1 ? cells[0] : '(' + cells.join(', ') + ')'
}

// A default per dtype for the defaults pipeline, as the column argument spells it and as the
// output prints it (src/pipeline/pqsrc.h: a number of the column's dtype, true/false for a bool,
// the text itself for bytes, [] for a list).
function defaultFor(col) {
  if (col.list) return { arg: '[]', text: '[]' }
  if (col.dtype === 'bool') return { arg: 'true', text: 'true' }
  if (col.dtype === 'bytes') return { arg: 'NA', text: 'NA' }
  if (col.dtype.startsWith('uint')) return { arg: '7', text: '7' }
  if (col.dtype.startsWith('float')) return { arg: '2.5', text: '2.5' }
  return { arg: '-1', text: '-1' }
}

// ---- Fixtures ---------------------------------------------------------------------------------

// Each fixture: a file name, the writer, its settings and what the written file must show
// (expect: codec, pageVersion, column encodings, at least so many row groups or pages per
// chunk, a dictionary fallback). The columns come from a function so each writer's files are
// made from the same kinds of values.
const PW_KINDS = ALL_KINDS
const HW_KINDS = ALL_KINDS.filter((k) => k !== 'fsl_f32' && k !== 'list_f64')
const someNulls = (rate, nullsFrom) => (kind, i) =>
  ({ nullable: true, nullRate: i % 5 === 4 ? 0 : rate, nullsFrom })

const fixtures = []
const fx = (f) => fixtures.push(f)

// parquet-wasm: every codec, both page versions, PLAIN, dictionaries (with and without a
// fallback), the delta encodings, BYTE_STREAM_SPLIT, row groups, small pages.
fx({ file: 'pw_plain_v1_uncompressed.parquet', writer: 'parquet-wasm', rows: 200,
  columns: (n) => columnsOf(PW_KINDS, n, 1),
  settings: { codec: 'UNCOMPRESSED', pageVersion: 1, dictionary: false },
  expect: { codec: 'UNCOMPRESSED', pageVersion: 1, allEncodings: ['PLAIN'] } })
fx({ file: 'pw_nulls_v1_snappy.parquet', writer: 'parquet-wasm', rows: 300,
  columns: (n) => columnsOf(PW_KINDS, n, 2, someNulls(0.2)),
  settings: { codec: 'SNAPPY', pageVersion: 1 },
  expect: { codec: 'SNAPPY', pageVersion: 1 } })
for (const [i, codec] of ['GZIP', 'ZSTD', 'LZ4_RAW', 'BROTLI'].entries()) {
  const v = i % 2 ? 2 : 1
  fx({ file: `pw_${codec.toLowerCase()}_v${v}.parquet`, writer: 'parquet-wasm', rows: 400,
    columns: (n) => columnsOf(PW_KINDS, n, 3 + i, someNulls(0.1)),
    settings: { codec, pageVersion: v }, expect: { codec, pageVersion: v } })
}
fx({ file: 'pw_dict_v2_zstd.parquet', writer: 'parquet-wasm', rows: 500,
  columns: (n) => columnsOf(PW_KINDS, n, 8, () => ({ card: 7, nullable: true, nullRate: 0.05 })),
  settings: { codec: 'ZSTD', pageVersion: 2 },
  expect: { codec: 'ZSTD', pageVersion: 2, dictionaryPages: true,
    encodings: { i32: ['RLE_DICTIONARY'], str: ['RLE_DICTIONARY'], f64: ['RLE_DICTIONARY'] } } })
for (const v of [1, 2]) {
  fx({ file: `pw_dict_fallback_v${v}.parquet`, writer: 'parquet-wasm', rows: 3000,
    columns: (n) => columnsOf(['i32', 'i64', 'f64', 'str', 'bin'], n, 10 + v,
      () => ({ nullable: true, nullRate: 0.1, edges: false })),
    settings: { codec: 'SNAPPY', pageVersion: v, dictionaryPageSizeLimit: 256,
      dataPageSizeLimit: 1024, writeBatchSize: 64 },
    expect: { codec: 'SNAPPY', pageVersion: v, fallback: ['i32', 'i64', 'f64', 'str', 'bin'] } })
}
for (const v of [1, 2]) {
  const ints = ['i8', 'i16', 'i32', 'i64', 'u8', 'u16', 'u32', 'u64', 'date', 'ts_ms', 'ts_us',
    'ts_ns']
  const columnEncoding = Object.fromEntries(ints.map((k) => [k, 'DELTA_BINARY_PACKED']))
  columnEncoding.str = v === 1 ? 'DELTA_LENGTH_BYTE_ARRAY' : 'DELTA_BYTE_ARRAY'
  columnEncoding.bin = v === 1 ? 'DELTA_BYTE_ARRAY' : 'DELTA_LENGTH_BYTE_ARRAY'
  fx({ file: `pw_delta_v${v}.parquet`, writer: 'parquet-wasm', rows: 700,
    columns: (n) => [
      ...columnsOf([...ints, 'str', 'bin'], n, 20 + v, someNulls(0.15)),
      makeColumn('sorted32', 'i32', n, 25 + v, { sorted: true }),
      makeColumn('sorted64', 'i64', n, 27 + v, { sorted: true }),
    ],
    settings: { codec: 'UNCOMPRESSED', pageVersion: v, dataPageSizeLimit: 2048, writeBatchSize: 100,
      columnEncoding: { ...columnEncoding, sorted32: 'DELTA_BINARY_PACKED',
        sorted64: 'DELTA_BINARY_PACKED' } },
    expect: { pageVersion: v, encodings: Object.fromEntries(
      Object.entries(columnEncoding).map(([c, e]) => [c, [e]])) } })
}
fx({ file: 'pw_byte_stream_split.parquet', writer: 'parquet-wasm', rows: 300,
  columns: (n) => columnsOf(['f32', 'f64', 'f16', 'i32', 'i64', 'fsb'], n, 30, someNulls(0.1)),
  settings: { codec: 'SNAPPY', pageVersion: 1,
    columnEncoding: { f32: 'BYTE_STREAM_SPLIT', f64: 'BYTE_STREAM_SPLIT', f16: 'BYTE_STREAM_SPLIT',
      i32: 'BYTE_STREAM_SPLIT', i64: 'BYTE_STREAM_SPLIT', fsb: 'BYTE_STREAM_SPLIT' } },
  expect: { encodings: { f32: ['BYTE_STREAM_SPLIT'], f64: ['BYTE_STREAM_SPLIT'],
    f16: ['BYTE_STREAM_SPLIT'], i32: ['BYTE_STREAM_SPLIT'], i64: ['BYTE_STREAM_SPLIT'],
    fsb: ['BYTE_STREAM_SPLIT'] } } })
fx({ file: 'pw_row_groups.parquet', writer: 'parquet-wasm', rows: 1000,
  columns: (n) => columnsOf(PW_KINDS, n, 31, someNulls(0.1, 250)),
  settings: { codec: 'SNAPPY', pageVersion: 1, rowGroupSize: 97 },
  expect: { rowGroups: 11 } })
for (const v of [1, 2]) {
  fx({ file: `pw_small_pages_v${v}.parquet`, writer: 'parquet-wasm', rows: 2000,
    columns: (n) => columnsOf(PW_KINDS, n, 32 + v, someNulls(0.2)),
    settings: { codec: v === 1 ? 'GZIP' : 'LZ4_RAW', pageVersion: v, dataPageSizeLimit: 128,
      writeBatchSize: 8, dictionaryPageSizeLimit: 512, rowGroupSize: 1500 },
    expect: { pageVersion: v, minPagesPerChunk: 20, rowGroups: 2 } })
}
fx({ file: 'pw_timestamps.parquet', writer: 'parquet-wasm', rows: 50,
  columns: (n) => columnsOf(['date', 'ts_ms', 'ts_us', 'ts_ns'], n, 35),
  settings: { codec: 'UNCOMPRESSED', pageVersion: 1 }, expect: {} })
fx({ file: 'pw_empty.parquet', writer: 'parquet-wasm', rows: 0,
  columns: (n) => columnsOf(PW_KINDS, n, 36, someNulls(0.5)),
  settings: { codec: 'SNAPPY', pageVersion: 1 }, expect: {} })
fx({ file: 'pw_one_row.parquet', writer: 'parquet-wasm', rows: 1,
  columns: (n) => columnsOf(PW_KINDS, n, 37, { nullable: true }),
  settings: { codec: 'ZSTD', pageVersion: 2 }, expect: { codec: 'ZSTD', pageVersion: 2 } })
fx({ file: 'pw_one_column.parquet', writer: 'parquet-wasm', rows: 100,
  columns: (n) => [makeColumn('x', 'i64', n, 38, { nullable: true, nullRate: 0.1 })],
  settings: { codec: 'SNAPPY', pageVersion: 1 }, expect: {} })

// hyparquet-writer: data page v2 only (it writes no other); PLAIN, RLE booleans, dictionaries
// when they pay or when asked for, the three delta encodings, BYTE_STREAM_SPLIT, every codec
// (ZSTD and LZ4_RAW in their stored forms, above), a codec per column, row groups, small pages.
fx({ file: 'hw_plain_uncompressed.parquet', writer: 'hyparquet-writer', rows: 200,
  columns: (n) => columnsOf(HW_KINDS, n, 101),
  settings: { codec: 'UNCOMPRESSED', encoding: 'PLAIN' },
  expect: { codec: 'UNCOMPRESSED', pageVersion: 2, allEncodings: ['PLAIN'] } })
fx({ file: 'hw_nulls_snappy.parquet', writer: 'hyparquet-writer', rows: 300,
  columns: (n) => columnsOf(HW_KINDS, n, 102, someNulls(0.2)),
  settings: { codec: 'SNAPPY' }, expect: { codec: 'SNAPPY', pageVersion: 2,
    encodings: { bool: ['RLE'] } } })
for (const [i, codec] of ['GZIP', 'BROTLI', 'ZSTD', 'LZ4_RAW'].entries()) {
  fx({ file: `hw_${codec.toLowerCase()}.parquet`, writer: 'hyparquet-writer', rows: 400,
    columns: (n) => columnsOf(HW_KINDS, n, 103 + i, someNulls(0.1)),
    settings: { codec }, expect: { codec, pageVersion: 2 } })
}
fx({ file: 'hw_codec_per_column.parquet', writer: 'hyparquet-writer', rows: 300,
  columns: (n) => columnsOf(['i32', 'str', 'f64', 'bin', 'i64', 'list_i32'], n, 108,
    someNulls(0.1)),
  settings: { codec: 'SNAPPY', columnCodec: { i32: 'GZIP', str: 'BROTLI', f64: 'ZSTD',
    bin: 'LZ4_RAW', i64: 'UNCOMPRESSED' } },
  expect: { codecs: ['GZIP', 'BROTLI', 'ZSTD', 'LZ4_RAW', 'UNCOMPRESSED', 'SNAPPY'] } })
fx({ file: 'hw_dictionary.parquet', writer: 'hyparquet-writer', rows: 500,
  columns: (n) => columnsOf(HW_KINDS, n, 109, () => ({ card: 9, nullable: true, nullRate: 0.1 })),
  settings: { codec: 'SNAPPY', columnEncoding: Object.fromEntries(
    HW_KINDS.filter((k) => k !== 'bool').map((k) => [k, 'RLE_DICTIONARY'])) },
  expect: { dictionaryPages: true, encodings: { i32: ['RLE_DICTIONARY'], str: ['RLE_DICTIONARY'],
    f16: ['RLE_DICTIONARY'], list_i32: ['RLE_DICTIONARY'] } } })
{
  const ints = ['i8', 'i16', 'i32', 'i64', 'u8', 'u16', 'u32', 'u64', 'date', 'ts_ms', 'ts_us',
    'ts_ns', 'list_i32']
  const columnEncoding = Object.fromEntries(ints.map((k) => [k, 'DELTA_BINARY_PACKED']))
  columnEncoding.str = 'DELTA_BYTE_ARRAY'
  columnEncoding.bin = 'DELTA_LENGTH_BYTE_ARRAY'
  columnEncoding.list_str = 'DELTA_BYTE_ARRAY'
  columnEncoding.sorted32 = 'DELTA_BINARY_PACKED'
  columnEncoding.sorted64 = 'DELTA_BINARY_PACKED'
  fx({ file: 'hw_delta.parquet', writer: 'hyparquet-writer', rows: 700,
    columns: (n) => [
      ...columnsOf([...ints, 'str', 'bin', 'list_str'], n, 110, someNulls(0.15)),
      makeColumn('sorted32', 'i32', n, 111, { sorted: true }),
      makeColumn('sorted64', 'i64', n, 112, { sorted: true }),
    ],
    settings: { codec: 'UNCOMPRESSED', columnEncoding },
    expect: { encodings: Object.fromEntries(
      Object.entries(columnEncoding).map(([c, e]) => [c, [e]])) } })
}
fx({ file: 'hw_byte_stream_split.parquet', writer: 'hyparquet-writer', rows: 300,
  columns: (n) => columnsOf(['f32', 'f64', 'f16', 'i32', 'i64', 'fsb'], n, 113, someNulls(0.1)),
  settings: { codec: 'SNAPPY', encoding: 'BYTE_STREAM_SPLIT' },
  expect: { allEncodings: ['BYTE_STREAM_SPLIT'] } })
fx({ file: 'hw_row_groups_small_pages.parquet', writer: 'hyparquet-writer', rows: 1000,
  columns: (n) => columnsOf(HW_KINDS, n, 114, someNulls(0.2, 650)),
  settings: { codec: 'SNAPPY', rowGroupSize: 300, dataPageSizeLimit: 64 },
  expect: { rowGroups: 4, minPagesPerChunk: 10 } })
fx({ file: 'hw_empty.parquet', writer: 'hyparquet-writer', rows: 0,
  columns: (n) => columnsOf(HW_KINDS, n, 115, { nullable: true }),
  settings: { codec: 'SNAPPY' }, expect: {} })
fx({ file: 'hw_one_row.parquet', writer: 'hyparquet-writer', rows: 1,
  columns: (n) => columnsOf(HW_KINDS, n, 116),
  settings: { codec: 'GZIP' }, expect: { codec: 'GZIP' } })
fx({ file: 'hw_one_column.parquet', writer: 'hyparquet-writer', rows: 100,
  columns: (n) => [makeColumn('s', 'str', n, 117, { nullable: true, nullRate: 0.1 })],
  settings: { codec: 'SNAPPY' }, expect: {} })

// Fails when the written file does not show a setting asked of the writer.
function checkExpect(f, seen) {
  const problems = []
  const e = f.expect
  if (e.codec && (seen.codecs.size !== 1 || !seen.codecs.has(e.codec))) {
    problems.push(`codec ${e.codec} asked, file has ${[...seen.codecs]}`)
  }
  for (const c of e.codecs || []) if (!seen.codecs.has(c)) problems.push(`no ${c} chunk`)
  if (e.pageVersion && (seen.pageVersions.size !== 1 || !seen.pageVersions.has(e.pageVersion)) &&
      f.rows > 0) {
    problems.push(`data page v${e.pageVersion} asked, file has v${[...seen.pageVersions]}`)
  }
  for (const [col, want] of Object.entries(e.encodings || {})) {
    const got = seen.encodings[col] || new Set()
    for (const w of want) {
      if (!got.has(w)) problems.push(`column ${col}: no ${w} page (${[...got]})`)
    }
  }
  for (const w of e.allEncodings || []) {
    if (!Object.values(seen.encodings).some((s) => s.has(w))) problems.push(`no ${w} page`)
  }
  if (e.allEncodings) {
    for (const [col, got] of Object.entries(seen.encodings)) {
      for (const g of got) {
        if (!e.allEncodings.includes(g)) problems.push(`column ${col}: ${g} page, not asked for`)
      }
    }
  }
  if (e.dictionaryPages && !seen.dictionaryPages) problems.push('no dictionary page')
  for (const col of e.fallback || []) {
    if (!seen.fallbackColumns.has(col)) problems.push(`column ${col}: no dictionary fallback`)
  }
  if (e.rowGroups && seen.rowGroups < e.rowGroups) {
    problems.push(`${e.rowGroups} row groups asked, file has ${seen.rowGroups}`)
  }
  if (e.minPagesPerChunk && seen.maxPagesPerChunk < e.minPagesPerChunk) {
    problems.push(`${e.minPagesPerChunk} pages a chunk asked, file has ${seen.maxPagesPerChunk}`)
  }
  if (problems.length) throw new Error(`${f.file} (${f.writer}): ${problems.join('; ')}`)
}

async function main() {
  const outDir = process.argv[2]
  if (!outDir) {
    process.stderr.write('usage: node tests/parquet/gen.mjs OUTDIR\n')
    process.exit(2)
  }
  fs.mkdirSync(outDir, { recursive: true })
  const manifest = []
  const cases = []
  for (const f of fixtures) {
    const cols = f.columns(f.rows)
    const buf = f.writer === 'parquet-wasm' ? writeWithParquetWasm(cols, f.settings)
      : writeWithHyparquetWriter(cols, f.settings)
    const file = path.join(outDir, f.file)
    fs.writeFileSync(file, buf)

    const { metadata, rows } = await readBack(buf)
    const seen = inspect(buf, metadata)
    checkExpect(f, seen)
    const columns = topColumns(metadata)
    if (rows.length !== f.rows || Number(metadata.num_rows) !== f.rows) {
      throw new Error(`${f.file}: wrote ${f.rows} rows, read back ${rows.length}`)
    }

    // Every cell's text, and the first null in the order the source meets them (row by row,
    // columns in file order).
    const texts = []
    const nulls = Object.fromEntries(columns.map((c) => [c.name, 0]))
    let firstNull = null
    const rgStarts = []
    let acc = 0
    for (const rg of metadata.row_groups) { rgStarts.push(acc); acc += Number(rg.num_rows) }
    rows.forEach((row, r) => {
      texts.push(columns.map((c) => {
        const t = fmtCell(c, row[c.name], `${f.file}: row ${r}: column ${c.name}`)
        if (t === null) {
          nulls[c.name]++
          if (!firstNull) {
            let rg = 0
            while (rg + 1 < rgStarts.length && rgStarts[rg + 1] <= r) rg++
            firstNull = { column: c.name, rowGroup: rg, row: r }
          }
        }
        return t
      }))
    })
    const hasNulls = firstNull !== null
    if (hasNulls !== cols.some((c) => c.values.includes(null))) {
      throw new Error(`${f.file}: nulls written and nulls read back disagree`)
    }
    if (!hasNulls) {
      fs.writeFileSync(file + '.expected', texts.map((t) => fmtRow(t) + '\n').join(''))
    } else {
      // Without defaults the source stops at the first null: nothing is promised about the
      // lines before the error (a source may print them or not), so the plain run of such a
      // file is checked for its error, and its values through the defaults run.
      fs.writeFileSync(file + '.expected', texts.slice(0, firstNull.row)
        .map((t) => fmtRow(t) + '\n').join(''))
    }

    let defaultArgs = null
    if (columns.some((c) => c.optional)) {
      const defs = columns.map((c) => (c.optional ? defaultFor(c) : null))
      defaultArgs = columns.map((c, i) => (defs[i] ? `${c.name}=${defs[i].arg}` : c.name))
      fs.writeFileSync(file + '.defaults.expected', texts.map((t) =>
        fmtRow(t.map((x, i) => (x === null ? defs[i].text : x))) + '\n').join(''))
    }

    let projArgs = null
    if (columns.length >= 2) {
      // Two columns, the later first; defaults as above so a null does not end the run.
      const a = Math.floor(columns.length / 3)
      const b = columns.length - 1
      const defs = [b, a].map((i) => (columns[i].optional ? defaultFor(columns[i]) : null))
      projArgs = [b, a].map((i, j) =>
        (defs[j] ? `${columns[i].name}=${defs[j].arg}` : columns[i].name))
      fs.writeFileSync(file + '.proj.expected', texts.map((t) =>
        fmtRow([b, a].map((i, j) => (t[i] === null ? defs[j].text : t[i]))) + '\n').join(''))
    }

    manifest.push({
      file: f.file,
      writer: f.writer,
      rows: f.rows,
      rowGroups: seen.rowGroups,
      columns: columns.map((c) => c.name),
      types: columns.map((c) => (c.list ? `list<${c.dtype}>` : c.dtype) + (c.optional ? '?' : '')),
      nulls,
      hasNulls,
      firstNull,
      codec: [...seen.codecs].sort(),
      encoding: Object.fromEntries(
        Object.entries(seen.encodings).map(([c, s]) => [c, [...s].sort()])),
      pageVersion: [...seen.pageVersions].sort(),
      dictionaryPages: seen.dictionaryPages,
      dictionaryFallback: [...seen.fallbackColumns].sort(),
      maxPagesPerChunk: seen.maxPagesPerChunk,
      settings: f.settings,
      defaultArgs,
      projArgs,
    })
    cases.push([f.file, (defaultArgs || []).join(','), (projArgs || []).join(','),
      firstNull ? firstNull.column : '', firstNull ? firstNull.rowGroup : '',
      firstNull ? firstNull.row : ''].join('|'))
  }
  fs.writeFileSync(path.join(outDir, 'manifest.json'), JSON.stringify(manifest, null, 1) + '\n')
  fs.writeFileSync(path.join(outDir, 'cases.txt'), cases.join('\n') + '\n')
  process.stdout.write(`gen.mjs: ${manifest.length} files in ${outDir}\n`)
}

// For tests of this file itself: the float and bytes formatting.
export { shortest, escapeBytes, fmtG, strtof }

if (process.argv[1] && fileURLToPath(import.meta.url) === path.resolve(process.argv[1])) {
  main().catch((e) => {
    process.stderr.write(`gen.mjs: ${e.stack || e}\n`)
    process.exit(1)
  })
}
