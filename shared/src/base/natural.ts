/**
 * The order people expect names in, one for the page and the CLI: digits compare as numbers
 * (f1, f2, f10, f100), letters by the locale's collation.
 */
const collator = new Intl.Collator(undefined, { numeric: true });

export const compareNames = (a: string, b: string): number => collator.compare(a, b) || (a < b ? -1 : a > b ? 1 : 0);
