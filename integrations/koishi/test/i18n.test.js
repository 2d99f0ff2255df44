// @ts-check
'use strict'
// The locale files: zh-CN and en-US hold the same keys, every text is filled in (zh-CN in
// Chinese), every config key is described in both. (test/commands.test.js checks that Koishi
// finds every text the commands use.)

const { test } = require('node:test')
const assert = require('node:assert/strict')
const zh = require('../locales/zh-CN.json')
const en = require('../locales/en-US.json')
const { Config } = require('../src')

/**
 * Every leaf of a locale tree: dotted path → value.
 * @param {any} tree @param {string} [prefix] @returns {Map<string, unknown>}
 */
function leaves(tree, prefix = '') {
  /** @type {Map<string, unknown>} */
  const out = new Map()
  for (const [k, v] of Object.entries(tree)) {
    if (v && typeof v === 'object') for (const [p, x] of leaves(v, prefix + k + '.')) out.set(p, x)
    else out.set(prefix + k, v)
  }
  return out
}

const HAN = /[\u4e00-\u9fff]/

test('zh-CN and en-US have the same keys, every text filled in, the same placeholders', () => {
  const a = leaves(zh)
  const b = leaves(en)
  assert.deepEqual([...a.keys()].sort(), [...b.keys()].sort())
  for (const [path, value] of a) {
    const other = b.get(path)
    assert.equal(typeof value, 'string', path)
    assert.equal(typeof other, 'string', path)
    assert.ok(String(value).trim() && String(other).trim(), `${path} is empty`)
    const holes = (/** @type {unknown} */ s) => [...String(s).matchAll(/\{(\w+)\}/g)].map(m => m[1]).sort()
    assert.deepEqual(holes(value), holes(other), `${path}: the same placeholders`)
    // Chinese texts in zh-CN (bare placeholders, separators and the like excepted)
    if (/[A-Za-z]{3}/.test(String(other)) && !/^\{\w+\}$/.test(String(value))) {
      assert.match(String(value), HAN, `${path} is in Chinese`)
    }
    // chat messages: Koishi parses them as elements (the config's descriptions are Markdown)
    if (!path.startsWith('_config.')) assert.doesNotMatch(String(value) + String(other), /[<>]/, `${path}: no markup`)
  }
})

test('the config schema: every key described in zh-CN and en-US, sections titled', () => {
  const schema = /** @type {any} */ (Config)
  assert.equal(schema.type, 'intersect')
  /** @type {string[]} */
  const keys = []
  for (const section of schema.list) {
    const title = section.meta.description
    assert.match(title['zh-CN'], HAN)
    assert.ok(title['en-US'])
    for (const [key, inner] of Object.entries(section.dict)) {
      keys.push(key)
      const d = /** @type {any} */ (inner).meta.description
      assert.ok(d && typeof d === 'object', `${key} has a description`)
      assert.match(d['zh-CN'], HAN, `${key} in Chinese`)
      assert.ok(d['en-US'] && !HAN.test(d['en-US']), `${key} in English`)
      assert.equal(d[''], d['zh-CN'], `${key}: other locales fall back to Chinese`)
    }
  }
  // every key of the config has its description (none forgotten in the locale files)
  assert.deepEqual(keys.sort(), Object.keys(Config({})).sort())
  assert.deepEqual(Object.keys(zh._config.connection).filter(k => k[0] !== '$').concat(Object.keys(zh._config.commands).filter(k => k[0] !== '$')).sort(), keys.sort())
  // the defaults of the command keys
  assert.equal(Config({}).readAuthority, 1)
  assert.equal(Config({}).changeAuthority, 4)
  assert.throws(() => Config({ changeAuthority: 6 }))
})
