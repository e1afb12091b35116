export interface View {
  title: string;
  render(main: HTMLElement): Promise<void>;
  /** Called every few seconds while the view is shown: update in place. */
  refresh?(): Promise<void>;
  dispose?(): void;
}
