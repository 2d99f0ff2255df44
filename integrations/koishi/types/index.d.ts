/**
 * The config as `apply` gets it: every key (the schema fills in the defaults).
 */
export type Config = {
    /**
     * URL of the service (its `api.bind`)
     */
    endpoint: string;
    /**
     * a token of the service (`api.token`, or one of `api.tokens`: role report, admin for the changing commands); '': none
     */
    token: string;
    /**
     * for an https:// endpoint: the CA (PEM file path, relative to Koishi's directory, or PEM text) that signed the service's certificate; '': Node's built-in roots
     */
    caFile: string;
    /**
     * the name this Koishi reports its bots under; '': derived
     */
    reporter: string;
    /**
     * ms
     */
    heartbeatInterval: number;
    /**
     * channel rows per `database.upsert`
     */
    batchSize: number;
    /**
     * ms
     */
    retryMin: number;
    /**
     * ms
     */
    retryMax: number;
    /**
     * ms
     */
    requestTimeout: number;
    /**
     * seconds; 0: message counts are not reported
     */
    messageReportInterval: number;
    /**
     * authority the reading commands need (explain, status, pins, drains, preview)
     */
    readAuthority: number;
    /**
     * authority the changing commands need (rebalance, pin, hold, unpin, drain, undrain)
     */
    changeAuthority: number;
};
export const name: "auto-assign";
export const inject: string[];
/** @type {string} shown in the console, Chinese first */
export const usage: string;
/**
 * The config's schema: what the console shows, and what turns the config written in koishi.yml
 * or given to `ctx.plugin` (every key may be left out) into a `Config`. (The cast fails to
 * type-check when the schema and the `Config` typedef disagree.)
 */
export const Config: import("koishi").Schema<Partial<Config>, Config>;
/** @param {import('koishi').Context} ctx @param {Config} config */
export function apply(ctx: import("koishi").Context, config: Config): void;
/**
 * The default reporter name: stable for one Koishi instance, different for two instances (even on
 * one host), so two Koishis never replace each other's bots.
 * @param {string} baseDir
 */
export function defaultReporter(baseDir: string): string;
