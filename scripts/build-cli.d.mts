// Types of scripts/build-cli.mjs, for the TypeScript that imports it (cli/test/run.ts).
export declare const OUT_DIR: string;
export declare function compiledCli(root?: string): { entry: string; stale?: undefined } | { entry?: undefined; stale: string };
export declare function buildCli(root?: string): Promise<number>;
