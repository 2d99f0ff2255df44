// @ts-check
'use strict'
// What the Koishi market and npm see: package.json's market fields, the files `npm pack` ships,
// and the shipped type declarations (types/*.d.ts), which must be what `tsc` generates from the
// JSDoc of src/ now and must serve a TypeScript user.

const { test } = require('node:test')
const assert = require('node:assert/strict')
const { execFile } = require('node:child_process')
const { mkdtempSync, readdirSync, readFileSync, rmSync } = require('node:fs')
const { tmpdir } = require('node:os')
const { join } = require('node:path')
const { promisify } = require('node:util')

const ROOT = join(__dirname, '..')
const pkg = require('../package.json')
const TSC = require.resolve('typescript/bin/tsc')
const run = promisify(execFile)

/** Runs tsc; rejects with its output on errors. @param {string[]} args */
async function tsc(args) {
  try {
    await run(process.execPath, [TSC, ...args], { cwd: ROOT })
  } catch (e) {
    const err = /** @type {any} */ (e)
    assert.fail(`tsc ${args.join(' ')} failed:\n${err.stdout ?? ''}${err.stderr ?? ''}`)
  }
}

test('package.json: the fields the Koishi market and npm show', () => {
  assert.equal(pkg.name, 'koishi-plugin-auto-assign')
  assert.equal(pkg.homepage, 'https://github.com/auto-assign/auto-assign/tree/main/integrations/koishi#readme')
  assert.deepEqual(pkg.repository, {
    type: 'git',
    url: 'git+https://github.com/auto-assign/auto-assign.git',
    directory: 'integrations/koishi',
  })
  assert.equal(pkg.bugs, 'https://github.com/auto-assign/auto-assign/issues')
  assert.equal(pkg.author, 'auto-assign maintainers')
  assert.equal(pkg.license, 'MIT')
  assert.equal(pkg.main, 'src/index.js')
  assert.equal(pkg.types, 'types/index.d.ts')
  assert.deepEqual(pkg.koishi.locales, ['zh', 'en'])
  assert.deepEqual(pkg.koishi.service, { required: ['database'] })
  assert.ok(pkg.koishi.description.zh && pkg.koishi.description.en)
  assert.match(pkg.koishi.description.zh, /[\u4e00-\u9fff]/)
  assert.equal(pkg.peerDependencies.koishi, '^4.18.9')
  // pinned exactly, like the rest
  for (const [name, version] of Object.entries(pkg.devDependencies)) assert.match(String(version), /^\d+\.\d+\.\d+$/, name)
  // the plugin needs nothing at run time but Koishi
  assert.equal(/** @type {any} */ (pkg).dependencies, undefined)
  const plugin = require('..')
  assert.equal(plugin.name, 'auto-assign')
  assert.deepEqual(plugin.inject, ['database'])
})

test('npm pack ships the sources, the locales, the declarations and both READMEs, no tests', async () => {
  const { stdout } = await run('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: ROOT })
  const [packed] = JSON.parse(stdout)
  /** @type {string[]} */
  const files = packed.files.map((/** @type {{ path: string }} */ f) => f.path)
  const sources = readdirSync(join(ROOT, 'src')).filter(f => f.endsWith('.js'))
  assert.ok(sources.includes('commands.js'))
  const want = [
    'package.json', 'README.md', 'README.en.md', 'locales/zh-CN.json', 'locales/en-US.json',
    ...sources.map(f => 'src/' + f),
    ...sources.map(f => 'types/' + f.replace(/\.js$/, '.d.ts')),
  ]
  for (const f of want) assert.ok(files.includes(f), `${f} is packed: ${files.join(' ')}`)
  const stray = files.filter(f => /^(test|node_modules|\.scratch)\/|^tsconfig|\.tgz$/.test(f))
  assert.deepEqual(stray, [])
})

test('the shipped declarations are exactly what tsc generates from the sources now', async () => {
  const out = mkdtempSync(join(tmpdir(), 'koishi-auto-assign-types-'))
  try {
    await tsc(['-p', 'tsconfig.types.json', '--outDir', out])
    const generated = readdirSync(out).sort()
    const shipped = readdirSync(join(ROOT, 'types')).sort()
    assert.deepEqual(shipped, generated, 'types/ holds one declaration per source file (run `npm run types`)')
    for (const f of generated) {
      assert.equal(readFileSync(join(ROOT, 'types', f), 'utf8'), readFileSync(join(out, f), 'utf8'),
        `types/${f} is stale: run \`npm run types\``)
    }
  } finally {
    rmSync(out, { recursive: true, force: true })
  }
  // a user's project resolves them with koishi alone (no transitive package by name)
  for (const f of readdirSync(join(ROOT, 'types'))) {
    const text = readFileSync(join(ROOT, 'types', f), 'utf8')
    const imports = [...text.matchAll(/(?:import\(|from )"([^"]+)"/g)].map(m => m[1])
    for (const i of imports) assert.ok(i === 'koishi' || i.startsWith('./'), `types/${f} imports ${i}`)
  }
})

test('a TypeScript user of the package compiles against the declarations', async () => {
  // test/types/consumer.ts resolves the package through package.json "types"; the lines it
  // expects to be errors fail the compilation if the declarations were `any`
  await tsc(['-p', 'test/types/tsconfig.json'])
})
