// A TypeScript user of the plugin, compiled by test/package.test.js against the SHIPPED
// declarations: `koishi-plugin-auto-assign` resolves to this package's directory, so to its
// package.json "types" (types/index.d.ts), not to the JavaScript sources.
import { Context } from 'koishi'
import * as autoAssign from 'koishi-plugin-auto-assign'

export function load(ctx: Context) {
  // every key may be left out (they all have defaults)
  ctx.plugin(autoAssign)
  ctx.plugin(autoAssign, { endpoint: 'http://127.0.0.1:8787', token: 'secret', readAuthority: 1, changeAuthority: 4 })
  // @ts-expect-error: a key's type is checked (the declarations are not `any`)
  ctx.plugin(autoAssign, { readAuthority: 'high' })
}

// the schema turns the input into the full config
const config: autoAssign.Config = autoAssign.Config({ reporter: 'koishi-a' })
const authority: number = config.changeAuthority + config.readAuthority
const endpoint: string = config.endpoint
// @ts-expect-error: Config has no such key
config.nonsense

const name: 'auto-assign' = autoAssign.name
const inject: string[] = autoAssign.inject
const usage: string = autoAssign.usage
const reporter: string = autoAssign.defaultReporter('/srv/koishi')
const apply: (ctx: Context, config: autoAssign.Config) => void = autoAssign.apply

export { authority, endpoint, name, inject, usage, reporter, apply }
